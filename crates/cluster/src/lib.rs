//! ferry's controller quorum: the cluster metadata image, the pure decisions over it (replica
//! placement, leader election, ISR changes), and the Raft quorum (openraft) that orders the
//! records every broker applies.
//!
//! Layers, each depending only on the ones above it:
//! - [`image`]: the metadata image and [`MetadataRecord`], a deterministic state machine;
//! - [`security`]: SCRAM credentials, ACL bindings and client quotas in the image;
//! - [`placement`]: rack-aware replica assignment;
//! - [`election`]: leader election, preferred-leader restoration and ISR rules, as functions
//!   of (image, event) returning records;
//! - [`reassignment`]: moving a partition's replicas (KIP-455): adding, removing, completing;
//! - [`elect_leaders`]: the ElectLeaders admin API's decisions (preferred, unclean), on
//!   [`election`]'s rules;
//! - [`raft`]: durable log and snapshot storage, the TCP transport, and [`Controller`], the API
//!   brokers use to propose records and follow the image;
//! - [`metadata_store`]: the cluster metadata as a broker uses it ([`metadata_store::MetadataStore`]:
//!   topics, the cluster id, producer-id blocks, registration and fencing at start-up), on a
//!   running quorum.

pub mod elect_leaders;
pub mod election;
pub mod error;
pub mod image;
pub mod liveness;
pub mod metadata_store;
pub mod placement;
pub mod raft;
pub mod reassignment;
pub mod security;

pub use error::{ClusterError, ErrorKind};
pub use image::{Applied, BrokerId, Endpoint, Image, ImageError, MetadataRecord};
pub use raft::{
    BrokerHeartbeat, Committed, Controller, ControllerConfig, HeartbeatCall, HeartbeatError,
    HeartbeatInbox, HeartbeatReply, OfflineReplica, QuorumInfo, QuorumTls, Traffic,
    TrafficObserver, VoterInfo,
};
