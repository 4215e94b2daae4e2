//! The rules of replication, free of I/O.
//!
//! Everything here is a function of (state, event, now): no sockets, no logs, no clock calls
//! (time comes in as a `tokio::time::Instant` argument), so each rule is tested from a table.
//! The broker crate owns the locks, the logs and the tasks, and asks these modules what to do:
//!
//! - [`partition_state`]: one partition as this broker sees it: its role, replicas and ISR, the
//!   leader's view of its followers, ISR expansion and shrink proposals, the high watermark over
//!   the ISR and the acks=all commit rule.
//! - [`follower_progress`]: when a follower was last caught up ("caught up as of a fetch").
//! - [`divergence`]: where a follower's log stops matching its leader's (KIP-320).
//! - [`fetch_session`] and [`follower_session`]: incremental fetch sessions (KIP-227), the
//!   leader's cache and the follower's handler.
//! - [`replica_selector`]: which replica a consumer should read from (KIP-392).

// The tests' tables spell their row types out, which is what a reader of a table wants.
#![cfg_attr(test, allow(clippy::type_complexity))]

pub mod divergence;
pub mod fetch_session;
pub mod follower_progress;
pub mod follower_session;
pub mod partition_state;
pub mod replica_selector;

pub use divergence::divergence;
pub use partition_state::{CommitStatus, IsrChange, IsrOutcome, ReplicaState, Role};
