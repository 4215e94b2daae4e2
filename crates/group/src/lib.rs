//! Consumer group coordination for ferry: the classic rebalance protocol (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, static membership), committed offsets, and their durable form in the
//! internal topic `__consumer_offsets`.
//!
//! The crate owns group state and rules; it does not own storage or sockets. The broker gives
//! it an [`OffsetsStore`] (appends to and reads from the `__consumer_offsets` partitions) and
//! calls [`GroupCoordinator::tick`] periodically so that session, rebalance and join-delay
//! deadlines fire. Invariants:
//! - a state change that clients must be able to rely on (a committed offset, the assignment of
//!   a new generation) is appended to the store before it is acknowledged;
//! - replaying the store from its start rebuilds every group's offsets and last generation;
//! - a member's request is answered exactly once: parked JoinGroup/SyncGroup requests get a
//!   response when the rebalance completes, when the member is removed, or with an error.

// Tests may read the real clock (clippy.toml's clock seam binds the code under test).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod assignor;
mod classic;
mod config;
mod consumer;
mod consumer_api;
mod coordinator;
mod group;
mod migration;
mod offsets;
pub mod offsets_topic;
mod store;
mod txn_offsets;

pub use config::{GroupConfig, MigrationPolicy};
pub use consumer::{ConsumerGroupOverrides, ConsumerProtocolConfig, TopicCatalog};
pub use coordinator::{ClientInfo, GroupCoordinator};
pub use store::{Appended, Durable, OffsetsStore, StoreError, StoredEntry, StoredRecord};
pub use txn_offsets::txn_offset_commit_error;

#[cfg(test)]
mod consumer_test;
#[cfg(test)]
mod migration_test;
#[cfg(test)]
mod ownership_test;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_offsets_test;
