//! The controller quorum on openraft 0.9 (`storage-v2`, `serde`).
//!
//! - [`log_store`]: the durable Raft log and vote, with openraft's storage rules in its doc;
//! - [`state_machine`]: the metadata [`Image`](crate::Image) as the state machine, with snapshots;
//! - [`network`]: length-prefixed JSON over TCP between voters, plus proposal forwarding;
//! - [`transport`]: the streams under it, plain TCP or TLS with client certificates;
//! - [`heartbeat`]: broker heartbeats (KIP-631) carried on that transport;
//! - [`quorum_progress`] and [`describe`]: each voter's progress as the leader sees it, and the
//!   quorum's description (DescribeQuorum);
//! - [`controller`]: [`Controller`], what a broker starts and talks to.
//!
//! Membership is static: the voters given at start (KRaft's `controller.quorum.voters`). A node
//! whose directory holds no log initializes the quorum with those voters; every voter may do so,
//! since they all propose the same first membership entry.

pub mod controller;
pub mod describe;
mod fsutil;
pub mod heartbeat;
pub mod log_store;
pub mod network;
pub mod quorum_progress;
pub mod state_machine;
pub mod transport;

pub use controller::{Committed, Controller, ControllerConfig};
pub use describe::{QuorumInfo, VoterInfo};
pub use heartbeat::{
    BrokerHeartbeat, HeartbeatCall, HeartbeatError, HeartbeatInbox, HeartbeatReply, OfflineReplica,
};
pub use network::{Traffic, TrafficObserver};
pub use transport::QuorumTls;

/// A voter's address, `host:port`.
pub type Node = openraft::BasicNode;

openraft::declare_raft_types!(
    /// openraft's type configuration for ferry's controller quorum.
    pub TypeConfig:
        D = crate::image::MetadataRecord,
        R = state_machine::ApplyResult,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry of the controller quorum.
pub type Entry = openraft::Entry<TypeConfig>;
/// The openraft handle of a controller.
pub type Raft = openraft::Raft<TypeConfig>;
/// Raft metrics (state, leader, term, applied index) of a controller.
pub type Metrics = openraft::RaftMetrics<u64, Node>;
