//! ferry's long-term tier: Kafka's tiered storage (KIP-405) for *closed* segments, under the
//! remote WAL (KIP-1176) that covers the active one.
//!
//! The pieces, each a room of its own and none tied to the broker:
//! - [`metadata`]: one segment in the tier ([`RemoteSegmentMetadata`]: offsets, leader epochs,
//!   size, max timestamp, the copy / delete state of Kafka's `RemoteLogSegmentState`) and its
//!   record in the compacted internal topic [`metadata::METADATA_TOPIC`], keyed by segment;
//! - [`partition`]: what one partition holds in the tier ([`RemotePartitionState`]), built by
//!   applying those records in order: which segment serves an offset, the tier's log start and
//!   size, the highest offset copied, and which segments retention deletes;
//! - [`segment_store`]: a segment's files (log, offset / time / transaction indexes, producer
//!   snapshot, leader-epoch checkpoint) copied to, read from and deleted in an
//!   [`ferry_objstore::ObjectStore`] (Kafka's `RemoteStorageManager`);
//! - [`copier`]: a segment copied (`CopyStarted`, the files, `CopyFinished`) and deleted
//!   (`DeleteStarted`, the objects, the tombstone), its records going to a
//!   [`TierMetadataSink`];
//! - [`reader`]: whole batches from an offset, as a Fetch below the local log start needs them,
//!   through the segment's offset index (kept in a bounded cache).
//!
//! What the broker adds on top (docs/rfcs/0004-long-term-tier.md): the leader's copy task, local
//! retention of copied segments, Fetch and ListOffsets below the local log start, and followers
//! that start from the leader's local log start.

pub mod copier;
pub mod error;
pub mod metadata;
pub mod partition;
pub mod reader;
pub mod segment_store;

pub use copier::{SegmentCopier, TierMetadataSink};
pub use error::{Result, TierError};
pub use metadata::{RemoteSegmentMetadata, RemoteSegmentState, TierMetadataRecord};
pub use partition::{RemotePartitionState, RetentionCheck};
pub use reader::TierReader;
pub use segment_store::{LoadedSegment, LocalSegmentFiles, RemoteSegmentStore, SegmentFileKind};

#[cfg(test)]
mod tests;
