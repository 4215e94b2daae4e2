//! ferry's per-partition log on local disk: Kafka's `LogSegment`, `LocalLog`/`UnifiedLog`,
//! `LogLoader`, `LeaderEpochFileCache`, `ProducerStateManager` and `LogManager`.
//!
//! Each log dir also holds `replication-offset-checkpoint`, the high watermarks of its partitions
//! ([`OffsetCheckpointFile`]), written by the broker.
//!
//! Layout of a partition directory `<topic>-<partition>/`:
//! - `<base_offset:020>.log`: whole magic v2 record batches, byte for byte as produced, with
//!   only the base offset, partition leader epoch and (LogAppendTime) timestamp fields rewritten;
//! - `<base_offset:020>.index` / `.timeindex`: sparse offset and time indexes (Kafka's format),
//!   written on roll and close, rebuilt by recovery;
//! - `<base_offset:020>.txnindex`: the transactions aborted by markers in that segment (Kafka's
//!   format, see [`txn`]), present only when there are some;
//! - `<offset:020>.snapshot`: producer state (idempotence, ongoing transactions) as of that
//!   offset;
//! - `leader-epoch-checkpoint`, `log-start-offset`, `recovery-point`,
//!   `cleaner-offset-checkpoint`: Kafka-style checkpoints; a missing one means empty or offset 0,
//!   so a new log writes none of them.
//!
//! What always holds: a reader sees only whole batches that were fully appended; offsets are
//! dense and increasing; everything below the recovery point is fsynced; after a crash, every
//! completely written batch below the first torn or corrupt byte is recovered. See [`log`] for
//! the locking rules and [`loader`] for recovery.
//!
//! Record-level helpers the broker applies before an append: [`recompress`] (broker-side
//! `compression.type`, as Kafka's log validator recompresses) and [`keyed_records`] (the (key,
//! value) batches of the broker's internal topics).
//!
//! Fetches that send record bytes with `sendfile` plan their read instead of making it
//! ([`slice`]): the same whole batches [`PartitionLog::read`] returns, as a range of a segment
//! file.
//!
//! Corruption ([`scrub`]): the broker's scrubber checks closed segments' batches chunk by chunk
//! without the writer lock, and repairs a corrupt range in place with another replica's bytes.
//!
//! Compacted topics (`LogConfig::compact`) refuse records without a key and are cleaned by
//! [`cleaner`] (Kafka's log cleaner): closed segments are rewritten keeping the latest record per
//! key, so offsets may have gaps there; reads still return whole batches, from the first batch
//! whose last offset is at or after the fetch offset.
//!
//! Transactions ([`txn`]): producers' transactional batches are appended like idempotent ones;
//! the transaction coordinator ends each transaction with a marker
//! ([`PartitionLog::append_control_marker`]). The log tracks the ongoing transactions
//! ([`PartitionLog::first_unstable_offset`]) and indexes the aborted ones per segment
//! ([`PartitionLog::collect_aborted_transactions`]), which is what a read_committed Fetch needs.

// Tests may read the real clock (clippy.toml's clock seam binds the code under test).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod batch;
pub mod cleaner;
mod config;
mod dir_space;
mod epoch_cache;
mod error;
mod index;
pub mod keyed_records;
pub mod loader;
pub mod log;
mod manager;
mod offset_checkpoint;
mod parts;
mod producer_state;
pub mod recompress;
mod records;
mod relocate;
mod retention;
pub mod scrub;
mod segment;
pub mod slice;
mod tier_source;
mod timestamp;
pub mod txn;

pub use batch::BatchCrcs;
pub use cleaner::{CleanStats, CLEANER_CHECKPOINT_FILE};
pub use config::{LogConfig, TimestampType};
pub use dir_space::DirSpace;
pub use epoch_cache::parse_checkpoint;
pub use error::{is_disk_full, ErrorKind, LogError, RejectedRecord, Result};
pub use log::{AppendInfo, FetchData, PartitionLog};
pub use manager::{is_dir_failure, LogManager, CLEAN_SHUTDOWN_FILE};
pub use offset_checkpoint::{OffsetCheckpointFile, REPLICATION_OFFSET_CHECKPOINT_FILE};
pub use parts::first_batch_header;
pub use producer_state::{BatchMetadata, ProducerEntry};
pub use relocate::{MoveProgress, MOVED_MARKER_FILE};
pub use retention::SegmentDeletionReason;
pub use scrub::{CorruptRange, RepairOutcome, ScrubCursor, ScrubStep, SegmentRef};
pub use segment::SegmentFile;
pub use slice::{FileSlice, SliceData};
pub use tier_source::TierCandidate;
pub use timestamp::record_timestamps;
pub use txn::{AbortedTxn, TxnMarker, TxnResult};

#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;
