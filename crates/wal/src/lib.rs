//! ferry's remote WAL (KIP-1176): the library core that moves follower data through the object
//! store of the leader's AZ instead of across AZs.
//!
//! - [`format`]: the WAL object layout (RFC 0001): many partitions' slices in one object,
//!   versioned and checksummed.
//! - [`metadata`]: the `__remote_wal_log_metadata` records (RFC 0002).
//! - [`uploader`]: the leader side, batching appends of many partitions into objects
//!   ([`batcher`]) and publishing their metadata in offset order per partition.
//! - [`fetcher`]: the follower's async WAL fetcher around [`follower`]: ranged GETs, verify,
//!   append, classic fallback.
//! - [`lifecycle`]: the object lifecycle (RFC 0003) and its valid transitions.
//! - [`gc`]: deletes objects nobody needs any more (every assigned replica or the long-term tier
//!   holds their data, or they are older than their capped lifetime), tombstones their
//!   metadata, and sweeps orphans.
//! - [`stages`]: the latency histogram of each stage of a byte's trip.
//! - [`cost`]: the estimated cost per hour of the WAL path from its counters.
//! - [`metrics`]: the WAL path's Prometheus metrics (requests, bytes, objects, follower paths,
//!   stage latencies, the estimated cost).
//! - [`follower`]: the follower side's pure decisions: which metadata to fetch, how to coalesce
//!   ranged GETs, and how to verify downloaded slices.
//! - [`leader_tracker`]: the leader side's pure decision of when a follower's report is answered
//!   by the classic fetch (a dropped range, a failed or stuck path, a follower far behind).
//! - [`mode_tracker`]: the follower side's pure choice between the WAL path and the classic
//!   fetch, per partition.
//! - [`republish`]: the range a new leader republishes into its own rack's bucket.
//!
//! What always holds across the crate: a metadata record is published only after its object's
//! PUT succeeded; per partition, records are published in increasing offset order; a follower
//! appends only verified slices that continue its local log exactly; any data that misses the
//! WAL path is reported as a range for the classic fetch, never silently lost; an object is
//! deleted only when every assigned replica or the long-term tier holds its data or it is older
//! than its capped `local.retention.ms` (then its metadata is tombstoned), or when it never got
//! metadata and is older than the orphan grace period.

// Tests may read the real clock (clippy.toml's clock seam binds the code under test).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod batcher;
pub mod cost;
pub mod error;
mod failure_log;
pub mod fetcher;
pub mod follower;
pub mod format;
pub mod gc;
pub mod leader_tracker;
pub mod lifecycle;
#[cfg(test)]
mod log_capture;
pub mod metadata;
pub mod metrics;
pub mod mode_tracker;
pub mod republish;
mod sequencer;
pub mod slice_bytes;
pub mod stages;
pub mod uploader;

pub use error::{ErrorKind, Result, WalError};
pub use slice_bytes::SliceBytes;
