//! The ferry broker: request handlers, replica manager and server (its configuration is
//! `ferry_config`, its replication rules `ferry_replication`).
//!
//! Data path: `server::connection` reads a frame → `ferry_protocol` decodes it →
//! `handlers` act on the `broker::Broker` state → `replica_manager` appends to or reads from
//! `ferry_log` partition logs → the response goes back through the connection's writer task.

// Tests may read the real clock (clippy.toml's clock seam binds the code under test).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod acl;
pub mod broker;
pub mod client_quotas;
pub mod corruption;
pub mod errors;
pub mod fetch_slices;
pub mod group_store;
pub mod handlers;
pub mod host;
pub mod inter_broker;
pub mod internal_topic;
pub mod liveness;
pub mod log_dir_moves;
pub mod log_levels;
pub mod remote_wal;
pub mod replica_fetcher;
pub mod replica_manager;
pub mod replication_throttle;
pub mod security;
pub mod server;
pub mod tier;
pub mod tls;
pub mod topic_follower;
pub mod topic_producer;
pub mod txn_markers;
pub mod txn_store;

pub use security::ConnectionSecurity;
pub use server::Server;
