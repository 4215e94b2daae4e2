//! Broker heartbeats (KIP-631's `BrokerHeartbeat`, carried on the controller transport).
//!
//! Why the controller transport and not a Kafka `BrokerHeartbeat` request on the Kafka
//! listener: every node is a voter, so each broker already knows every controller's address
//! and has a connection path to the leader (the one `Propose` uses); a heartbeat then never
//! queues behind client produce/fetch traffic, and no Kafka API has to be exposed to clients.
//! The fields and answers are Kafka's.
//!
//! The transport only delivers: a heartbeat reaching a voter is handed to whoever took
//! [`HeartbeatInbox`] from the [`Controller`](super::Controller) (the broker's liveness task,
//! which keeps the sessions while this node is the Raft leader). A heartbeat nobody takes is
//! answered with [`HeartbeatError::NotController`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::image::BrokerId;
pub use crate::image::OfflineReplica;

/// How many heartbeats may wait for the liveness task before new ones are refused.
const INBOX_CAPACITY: usize = 256;
/// How long a voter waits for its liveness task to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Kafka's `BrokerHeartbeatRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerHeartbeat {
    pub broker_id: BrokerId,
    /// The epoch the broker's registration got; a heartbeat of an older incarnation is stale.
    pub broker_epoch: i64,
    /// The last metadata log index the broker applied.
    pub current_metadata_offset: u64,
    pub want_fence: bool,
    pub want_shutdown: bool,
    /// The partitions whose replica here sat in a log dir that failed (Kafka's heartbeat
    /// carries `OfflineLogDirs`; the partitions say the same without a directory registry).
    /// The controller takes this broker out of their ISR and moves their leadership.
    #[serde(default)]
    pub offline_replicas: Vec<OfflineReplica>,
}

/// Kafka's `BrokerHeartbeatResponse` (without error and throttle, see [`HeartbeatError`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

/// Why a heartbeat was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum HeartbeatError {
    /// Kafka's STALE_BROKER_EPOCH: the heartbeat's epoch is not the registration's.
    #[error("stale broker epoch {got}; the registration has epoch {current}")]
    StaleBrokerEpoch { current: i64, got: i64 },
    /// Kafka's BROKER_ID_NOT_REGISTERED.
    #[error("broker {0} is not registered")]
    NotRegistered(BrokerId),
    /// Kafka's NOT_CONTROLLER: try the leader.
    #[error("not the active controller; leader hint: {leader:?}")]
    NotController { leader: Option<u64> },
    #[error("controller unreachable: {0}")]
    Unavailable(String),
}

/// A heartbeat waiting for the liveness task, with the way back to the sender.
#[derive(Debug)]
pub struct HeartbeatCall {
    pub request: BrokerHeartbeat,
    pub reply: oneshot::Sender<Result<HeartbeatReply, HeartbeatError>>,
}

/// The receiving end the liveness task takes from the controller.
pub type HeartbeatInbox = mpsc::Receiver<HeartbeatCall>;

/// Creates the channel between the transport and the liveness task.
pub(crate) fn channel() -> (mpsc::Sender<HeartbeatCall>, HeartbeatInbox) {
    mpsc::channel(INBOX_CAPACITY)
}

/// Hands `request` to this node's liveness task and waits for its answer.
pub(crate) async fn deliver(
    tx: &mpsc::Sender<HeartbeatCall>,
    request: BrokerHeartbeat,
    leader: Option<u64>,
) -> Result<HeartbeatReply, HeartbeatError> {
    let (reply, answer) = oneshot::channel();
    if tx.try_send(HeartbeatCall { request, reply }).is_err() {
        return Err(HeartbeatError::NotController { leader });
    }
    match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
        Ok(Ok(result)) => result,
        // The liveness task is gone (shutting down) or busy beyond reason.
        Ok(Err(_)) => Err(HeartbeatError::NotController { leader }),
        Err(_) => Err(HeartbeatError::Unavailable(
            "the liveness task did not answer".into(),
        )),
    }
}
