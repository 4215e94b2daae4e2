//! Records of the internal topic `__remote_wal_log_metadata` (RFC 0002,
//! `docs/rfcs/0002-remote-wal-metadata.md`): one record per uploaded slice, telling followers
//! where a partition's offsets `base..=last` can be range-read.
//!
//! - **Key** [`WalMetadataKey`]: (topic id, partition, base offset). The topic is compacted, so
//!   a republished slice (same partition and base offset, e.g. after an AZ failover) replaces the
//!   older record, and a tombstone removes it.
//! - **Value** [`WalSliceMetadata`]: bucket, object key, byte range, offsets, leader epoch,
//!   slice CRC-32C, object size, uploader and upload time. A *null* value is the tombstone
//!   written when the object is deleted ([`WalMetadataEvent::Tombstone`]).
//!
//! Both are `prost` messages (hand-written structs, no `.proto` build step) framed as
//! `varint length ++ message`. Decoding checks the frame length exactly (so a truncated or
//! padded record is an error even when the cut falls between two fields), refuses records above
//! [`MAX_KEY_LEN`]/[`MAX_VALUE_LEN`], and validates what a follower relies on (16-byte topic id,
//! `base <= last`, a non-empty byte range inside the object). Unknown fields are skipped, so a
//! newer broker may add fields without breaking older followers.
//!
//! Invariant the uploader keeps: a value is published only after its object's PUT succeeded.

use bytes::Bytes;
use prost::Message;
use uuid::Uuid;

use crate::error::{Result, WalError};

/// Name of the internal topic these records live in.
pub const METADATA_TOPIC: &str = "__remote_wal_log_metadata";
/// Largest encoded key accepted.
pub const MAX_KEY_LEN: usize = 64;
/// Largest encoded value accepted (a 63-byte bucket and a 1024-byte key fit comfortably).
pub const MAX_VALUE_LEN: usize = 2048;

/// Identity of one slice of one partition: the compaction key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WalMetadataKey {
    pub topic_id: Uuid,
    pub partition: i32,
    pub base_offset: i64,
}

/// Where offsets `base_offset..=last_offset` of one partition can be read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WalSliceMetadata {
    /// The bucket (of the uploader's AZ) holding the object.
    pub bucket: String,
    /// The object key (see `ferry_objstore::keys::WalObjectKey`).
    pub object_key: String,
    /// Byte position of the slice inside the object.
    pub byte_position: u64,
    /// Slice length in bytes (never 0).
    pub byte_length: u32,
    pub topic_id: Uuid,
    pub partition: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    /// Epoch under which the uploader led the partition; followers skip records whose epoch is
    /// older than the partition's current one.
    pub leader_epoch: i32,
    /// CRC-32C of the slice bytes.
    pub slice_crc: u32,
    /// Size of the whole object (lets a reader range-GET the footer and index).
    pub object_size: u64,
    pub uploader_broker_id: i32,
    /// Uploader's clock when the PUT completed, ms since the Unix epoch.
    pub upload_time_ms: i64,
}

impl WalSliceMetadata {
    pub fn key(&self) -> WalMetadataKey {
        WalMetadataKey {
            topic_id: self.topic_id,
            partition: self.partition,
            base_offset: self.base_offset,
        }
    }

    /// The slice's byte range inside the object.
    pub fn byte_range(&self) -> std::ops::Range<u64> {
        self.byte_position..self.byte_position + u64::from(self.byte_length)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.bucket.is_empty() || self.object_key.is_empty() {
            return Err("empty bucket or object key".into());
        }
        if self.byte_length == 0 {
            return Err("empty byte range".into());
        }
        if self.base_offset < 0 || self.last_offset < self.base_offset {
            return Err(format!(
                "offsets {}..={} are not a range",
                self.base_offset, self.last_offset
            ));
        }
        let end = self.byte_position.checked_add(u64::from(self.byte_length));
        if end.is_none_or(|end| end > self.object_size) {
            return Err(format!(
                "byte range {}+{} is outside an object of {} bytes",
                self.byte_position, self.byte_length, self.object_size
            ));
        }
        Ok(())
    }
}

/// One decoded record of the metadata topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalMetadataEvent {
    /// A slice was uploaded (or republished).
    Upsert(WalSliceMetadata),
    /// The slice's object was deleted; forget the key.
    Tombstone(WalMetadataKey),
}

/// A record ready for the metadata topic: key bytes and value bytes (`None` = tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalMetadataRecord {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

impl WalMetadataRecord {
    /// The record announcing `meta`.
    pub fn upsert(meta: &WalSliceMetadata) -> Result<Self> {
        Ok(Self {
            key: encode_key(&meta.key())?,
            value: Some(encode_value(meta)?),
        })
    }

    /// The tombstone that removes `key` once its object is deleted.
    pub fn tombstone(key: &WalMetadataKey) -> Result<Self> {
        Ok(Self {
            key: encode_key(key)?,
            value: None,
        })
    }

    /// Decodes a record; the value's identity must agree with the key.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<WalMetadataEvent> {
        let k = decode_key(key)?;
        let Some(value) = value else {
            return Ok(WalMetadataEvent::Tombstone(k));
        };
        let v = decode_value(value)?;
        if v.key() != k {
            return Err(bad(
                "value",
                format!("value describes {:?} but the key is {k:?}", v.key()),
            ));
        }
        Ok(WalMetadataEvent::Upsert(v))
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct KeyProto {
    #[prost(bytes = "vec", tag = "1")]
    topic_id: Vec<u8>,
    #[prost(int32, tag = "2")]
    partition: i32,
    #[prost(int64, tag = "3")]
    base_offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueProto {
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
}

fn bad(what: &'static str, reason: impl Into<String>) -> WalError {
    WalError::BadMetadata {
        what,
        reason: reason.into(),
    }
}

fn frame<M: Message>(msg: &M, what: &'static str, max: usize) -> Result<Bytes> {
    ferry_common::framed::encode(msg, max)
        .map_err(|e| WalError::Invalid(format!("metadata {what}: {e}")))
}

fn unframe<M: Message + Default>(buf: &[u8], what: &'static str, max: usize) -> Result<M> {
    ferry_common::framed::decode(buf, max).map_err(|e| bad(what, e))
}

fn topic_id(raw: &[u8], what: &'static str) -> Result<Uuid> {
    Uuid::from_slice(raw).map_err(|_| bad(what, format!("topic id of {} bytes", raw.len())))
}

/// Encodes a compaction key.
pub fn encode_key(key: &WalMetadataKey) -> Result<Bytes> {
    let proto = KeyProto {
        topic_id: key.topic_id.as_bytes().to_vec(),
        partition: key.partition,
        base_offset: key.base_offset,
    };
    frame(&proto, "key", MAX_KEY_LEN)
}

/// Decodes a compaction key.
pub fn decode_key(buf: &[u8]) -> Result<WalMetadataKey> {
    let p: KeyProto = unframe(buf, "key", MAX_KEY_LEN)?;
    Ok(WalMetadataKey {
        topic_id: topic_id(&p.topic_id, "key")?,
        partition: p.partition,
        base_offset: p.base_offset,
    })
}

/// Encodes a value; refuses one that would not decode (see the module docs).
pub fn encode_value(meta: &WalSliceMetadata) -> Result<Bytes> {
    meta.validate().map_err(WalError::Invalid)?;
    let proto = ValueProto {
        bucket: meta.bucket.clone(),
        object_key: meta.object_key.clone(),
        byte_position: meta.byte_position,
        byte_length: meta.byte_length,
        topic_id: meta.topic_id.as_bytes().to_vec(),
        partition: meta.partition,
        base_offset: meta.base_offset,
        last_offset: meta.last_offset,
        leader_epoch: meta.leader_epoch,
        slice_crc: meta.slice_crc,
        object_size: meta.object_size,
        uploader_broker_id: meta.uploader_broker_id,
        upload_time_ms: meta.upload_time_ms,
    };
    frame(&proto, "value", MAX_VALUE_LEN)
}

/// Decodes and validates a value.
pub fn decode_value(buf: &[u8]) -> Result<WalSliceMetadata> {
    let p: ValueProto = unframe(buf, "value", MAX_VALUE_LEN)?;
    let meta = WalSliceMetadata {
        topic_id: topic_id(&p.topic_id, "value")?,
        bucket: p.bucket,
        object_key: p.object_key,
        byte_position: p.byte_position,
        byte_length: p.byte_length,
        partition: p.partition,
        base_offset: p.base_offset,
        last_offset: p.last_offset,
        leader_epoch: p.leader_epoch,
        slice_crc: p.slice_crc,
        object_size: p.object_size,
        uploader_broker_id: p.uploader_broker_id,
        upload_time_ms: p.upload_time_ms,
    };
    meta.validate().map_err(|reason| bad("value", reason))?;
    Ok(meta)
}

/// The metadata-topic partition of a data partition: all its records land in one partition, so
/// their order is kept (RFC 0002, "Ordering").
pub fn metadata_partition(topic_id: Uuid, partition: i32, partitions: i32) -> i32 {
    let mut key = [0u8; 20];
    key[..16].copy_from_slice(topic_id.as_bytes());
    key[16..].copy_from_slice(&partition.to_be_bytes());
    let n = u32::try_from(partitions.max(1)).unwrap_or(1);
    i32::try_from(crc32c::crc32c(&key) % n).unwrap_or(0)
}

#[cfg(test)]
#[path = "metadata_test.rs"]
mod tests;
