//! ferry's per-partition log on local disk: Kafka's `LogSegment`, `LocalLog`/`UnifiedLog`,
//! `LogLoader`, `LeaderEpochFileCache`, `ProducerStateManager` and `LogManager`.
//!
//! Layout of a partition directory `<topic>-<partition>/`:
//! - `<base_offset:020>.log`: whole magic v2 record batches, byte for byte as produced, with
//!   only the base offset, partition leader epoch and (LogAppendTime) timestamp fields rewritten;
//! - `<base_offset:020>.index` / `.timeindex`: sparse offset and time indexes (Kafka's format),
//!   written on roll and close, rebuilt by recovery;
//! - `<offset:020>.snapshot`: idempotent producer state as of that offset;
//! - `leader-epoch-checkpoint`, `log-start-offset`, `recovery-point`: Kafka-style checkpoints.
//!
//! What always holds: a reader sees only whole batches that were fully appended; offsets are
//! dense and increasing; everything below the recovery point is fsynced; after a crash, every
//! completely written batch below the first torn or corrupt byte is recovered. See [`log`] for
//! the locking rules and [`loader`] for recovery.

pub mod batch;
mod config;
mod epoch_cache;
mod error;
mod index;
pub mod loader;
pub mod log;
mod manager;
mod producer_state;
mod retention;
mod segment;
mod timestamp;

pub use config::{LogConfig, TimestampType};
pub use error::{ErrorKind, LogError, Result};
pub use log::{AppendInfo, FetchData, PartitionLog};
pub use manager::{LogManager, CLEAN_SHUTDOWN_FILE};
pub use retention::SegmentDeletionReason;
pub use timestamp::record_timestamps;

#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;
