//! [`Controller`]: one voter of the controller quorum, as a broker starts and uses it.
//!
//! What it owns: the openraft node, its storage in `dir`, and (with more than one voter) a TCP
//! listener for its peers (speaking TLS when [`ControllerConfig::tls`] is set). What it offers: [`Controller::propose`] (commit a record through the
//! quorum, forwarding to the leader when this node is a follower), and the current metadata image
//! ([`Controller::image`], [`Controller::subscribe`]).
//!
//! With one voter (the default) the node is its own quorum: it needs no listener, elects itself
//! and commits alone, so a single `ferry serve` keeps working.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use ferry_common::SpaceReserve;

use super::describe::{self, QuorumInfo};
use super::heartbeat::{
    self, BrokerHeartbeat, HeartbeatCall, HeartbeatError, HeartbeatInbox, HeartbeatReply,
};
use super::log_store::LogStore;
use super::network::{self, ProposeFailure, TcpNetwork, TrafficObserver};
use super::quorum_progress::QuorumProgress;
use super::state_machine::{ApplyResult, StateMachineStore};
use super::transport::QuorumTls;
use super::{Metrics, Raft};
use crate::error::ClusterError;
use crate::image::{Applied, Image, MetadataRecord};

/// How to start a controller.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub node_id: u64,
    /// Every voter's `host:port` (KRaft's `controller.quorum.voters`). Empty means this node alone.
    pub voters: BTreeMap<u64, String>,
    /// Where the Raft log, vote and snapshot live.
    pub dir: PathBuf,
    pub heartbeat_interval: Duration,
    pub election_timeout_min: Duration,
    pub election_timeout_max: Duration,
    /// A snapshot is built after this many entries since the last one.
    pub snapshot_after_entries: u64,
    /// Entries kept in the log behind the last snapshot (for followers that lag slightly).
    pub entries_kept_after_snapshot: u64,
    /// How long a forwarded proposal may take.
    pub forward_timeout: Duration,
    /// Told the size of every frame exchanged with peers.
    pub traffic: Option<TrafficObserver>,
    /// TLS with client certificates on every connection between voters (and of brokers'
    /// heartbeats and forwarded proposals); `None`: plain TCP.
    pub tls: Option<QuorumTls>,
    /// Disk space the Raft log and snapshots may release when the disk is full, so the
    /// operator's remedies (deleting topics or records) still go through.
    pub space_reserve: Arc<SpaceReserve>,
    /// Wall-clock time of the voters' fetches, as DescribeQuorum reports them.
    pub clock: ferry_common::SharedClock,
}

impl ControllerConfig {
    pub fn new(node_id: u64, voters: BTreeMap<u64, String>, dir: impl Into<PathBuf>) -> Self {
        Self {
            node_id,
            voters,
            dir: dir.into(),
            heartbeat_interval: Duration::from_millis(100),
            election_timeout_min: Duration::from_millis(600),
            election_timeout_max: Duration::from_millis(1200),
            snapshot_after_entries: 1000,
            entries_kept_after_snapshot: 100,
            forward_timeout: Duration::from_secs(10),
            traffic: None,
            tls: None,
            space_reserve: Arc::new(SpaceReserve::none()),
            clock: ferry_common::system_clock(),
        }
    }

    /// A node that is its own quorum.
    pub fn single_node(node_id: u64, dir: impl Into<PathBuf>) -> Self {
        Self::new(node_id, BTreeMap::new(), dir)
    }

    fn raft_config(&self) -> Result<openraft::Config, ClusterError> {
        let ms = |d: Duration| d.as_millis().max(1) as u64;
        openraft::Config {
            cluster_name: "ferry-controller".into(),
            heartbeat_interval: ms(self.heartbeat_interval),
            election_timeout_min: ms(self.election_timeout_min),
            election_timeout_max: ms(self.election_timeout_max),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_after_entries.max(1)),
            max_in_snapshot_log_to_keep: self.entries_kept_after_snapshot,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ClusterError::Config(e.to_string()))
    }
}

/// A record committed by the quorum and applied to the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The Raft log index of the record; the image reflects it once its `applied_index` reaches
    /// this value.
    pub index: u64,
    pub applied: Applied,
}

/// One running voter of the controller quorum.
pub struct Controller {
    node_id: u64,
    raft: Raft,
    voters: BTreeMap<u64, String>,
    image: watch::Receiver<Arc<Image>>,
    server: Option<JoinHandle<()>>,
    forward_timeout: Duration,
    /// How this node reaches its peers (traffic observer, TLS).
    peers: TcpNetwork,
    heartbeats: tokio::sync::mpsc::Sender<HeartbeatCall>,
    inbox: std::sync::Mutex<Option<HeartbeatInbox>>,
    /// The voters' progress while this node leads (DescribeQuorum).
    progress: Arc<QuorumProgress>,
    /// Tells `progress` this node's log end while it leads.
    progress_task: JoinHandle<()>,
}

impl Controller {
    /// Starts voter `node_id` of the quorum `voters` with its storage in `dir`. With more than one
    /// voter it listens on its own address in `voters`.
    pub async fn start(
        node_id: u64,
        voters: BTreeMap<u64, String>,
        dir: impl Into<PathBuf>,
    ) -> Result<Self, ClusterError> {
        Self::start_with(ControllerConfig::new(node_id, voters, dir), None).await
    }

    /// Starts a controller from `config`, serving peers on `listener` if given (tests bind
    /// port 0 first), else on its own address in `config.voters`.
    pub async fn start_with(
        config: ControllerConfig,
        listener: Option<TcpListener>,
    ) -> Result<Self, ClusterError> {
        let mut voters = config.voters.clone();
        if voters.is_empty() {
            voters.insert(config.node_id, String::new());
        }
        let Some(own_addr) = voters.get(&config.node_id).cloned() else {
            return Err(ClusterError::Config(format!(
                "node {} is not one of the controller voters {:?}",
                config.node_id,
                voters.keys().collect::<Vec<_>>()
            )));
        };
        let raft_config = Arc::new(config.raft_config()?);
        let storage_err = |e: std::io::Error| ClusterError::Storage {
            path: config.dir.display().to_string(),
            detail: e.to_string(),
        };
        let reserve = &config.space_reserve;
        let log_store =
            LogStore::open_with_reserve(&config.dir, reserve.clone()).map_err(storage_err)?;
        let (state_machine, image) =
            StateMachineStore::open_with_reserve(&config.dir, reserve.clone())
                .map_err(storage_err)?;

        let listener = match listener {
            Some(l) => Some(l),
            None if voters.len() > 1 => Some(bind_retrying(&own_addr).await?),
            None => None,
        };
        let progress = Arc::new(QuorumProgress::new(config.clock.clone()));
        let peers = TcpNetwork {
            observer: config.traffic.clone(),
            tls: config.tls.clone(),
            progress: Some(progress.clone()),
        };
        let raft = Raft::new(
            config.node_id,
            raft_config,
            peers.clone(),
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| ClusterError::Raft(e.to_string()))?;
        let (heartbeats, inbox) = heartbeat::channel();
        let server =
            listener.map(|l| network::serve(l, raft.clone(), peers.clone(), heartbeats.clone()));
        let progress_task = tokio::spawn(track_leader_log_end(raft.metrics(), progress.clone()));
        let controller = Self {
            node_id: config.node_id,
            raft,
            voters,
            image,
            server,
            forward_timeout: config.forward_timeout,
            peers,
            heartbeats,
            inbox: std::sync::Mutex::new(Some(inbox)),
            progress,
            progress_task,
        };
        controller.initialize_if_new().await?;
        Ok(controller)
    }

    async fn initialize_if_new(&self) -> Result<(), ClusterError> {
        let initialized = self
            .raft
            .is_initialized()
            .await
            .map_err(|e| ClusterError::Raft(e.to_string()))?;
        if initialized {
            return Ok(());
        }
        // Only the lowest voter id bootstraps the quorum; the others learn the membership from
        // it. When every voter initialized at once, a node could take the initializing entry
        // after it had already won an election (openraft's following handler asserts it has
        // no leader state then), seen as a controller panic in about one start in fifteen.
        if self.voters.keys().next() != Some(&self.node_id) {
            return Ok(());
        }
        let members: BTreeMap<u64, BasicNode> = self
            .voters
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            // Another voter's initialization reached this node first.
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ClusterError::Raft(e.to_string())),
        }
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// Commits `record` through the quorum and returns once it is applied on the leader. On a
    /// follower the record is forwarded to the leader; without a known leader the error is
    /// [`ClusterError::NotController`] (retriable). A record the image rejects is
    /// [`ClusterError::Rejected`] (it still took a log index, with no effect).
    pub async fn propose(&self, record: MetadataRecord) -> Result<Committed, ClusterError> {
        let failure = match network::propose_local(&self.raft, record.clone()).await {
            Ok(done) => return committed(done),
            Err(f) => f,
        };
        let (leader, hint_addr) = match failure {
            ProposeFailure::NotLeader {
                leader,
                leader_addr,
            } => (leader, leader_addr),
            ProposeFailure::Raft(e) => return Err(ClusterError::Raft(e)),
        };
        let addr = leader
            .filter(|l| *l != self.node_id)
            .and_then(|l| self.voters.get(&l).cloned().or(hint_addr.clone()))
            .filter(|a| !a.is_empty());
        let Some(addr) = addr else {
            return Err(ClusterError::NotController {
                leader,
                leader_addr: hint_addr,
            });
        };
        let peer = leader.filter(|l| *l != self.node_id);
        match network::forward_propose(&addr, peer, record, self.forward_timeout, &self.peers).await
        {
            Ok(Ok(done)) => committed(done),
            Ok(Err(ProposeFailure::NotLeader {
                leader,
                leader_addr,
            })) => Err(ClusterError::NotController {
                leader,
                leader_addr,
            }),
            Ok(Err(ProposeFailure::Raft(e))) => Err(ClusterError::Raft(e)),
            Err(e) => Err(ClusterError::Network(format!("forwarding to {addr}: {e}"))),
        }
    }

    /// Sends a broker heartbeat to the active controller: handed to this node's own liveness
    /// task when this node leads, else forwarded to the leader (one hop) with `ttl` to answer.
    pub async fn heartbeat(
        &self,
        request: BrokerHeartbeat,
        ttl: Duration,
    ) -> Result<HeartbeatReply, HeartbeatError> {
        let leader = self.leader();
        if leader == Some(self.node_id) {
            return heartbeat::deliver(&self.heartbeats, request, leader).await;
        }
        let addr = leader
            .and_then(|l| self.voters.get(&l).cloned())
            .filter(|a| !a.is_empty());
        let Some(addr) = addr else {
            return Err(HeartbeatError::NotController { leader });
        };
        network::forward_heartbeat(&addr, leader, request, ttl, &self.peers).await
    }

    /// The quorum as its leader describes it (DescribeQuorum): answered here when this node
    /// leads, else asked of the leader (one hop); without a known leader the error is
    /// [`ClusterError::NotController`].
    pub async fn describe_quorum(&self) -> Result<QuorumInfo, ClusterError> {
        let failure = match describe::describe_local(&self.raft, &self.progress).await {
            Ok(info) => return Ok(info),
            Err(f) => f,
        };
        let leader = match failure {
            ProposeFailure::NotLeader { leader, .. } => leader,
            ProposeFailure::Raft(e) => return Err(ClusterError::Raft(e)),
        };
        let addr = leader
            .filter(|l| *l != self.node_id)
            .and_then(|l| self.voters.get(&l).cloned())
            .filter(|a| !a.is_empty());
        let Some(addr) = addr else {
            return Err(ClusterError::NotController {
                leader,
                leader_addr: None,
            });
        };
        match network::forward_describe_quorum(&addr, leader, self.forward_timeout, &self.peers)
            .await
        {
            Ok(Ok(info)) => Ok(info),
            Ok(Err(ProposeFailure::NotLeader {
                leader,
                leader_addr,
            })) => Err(ClusterError::NotController {
                leader,
                leader_addr,
            }),
            Ok(Err(ProposeFailure::Raft(e))) => Err(ClusterError::Raft(e)),
            Err(e) => Err(ClusterError::Network(format!("asking {addr}: {e}"))),
        }
    }

    /// The heartbeats this voter receives, for the task that keeps broker sessions; `None`
    /// once taken.
    pub fn take_heartbeats(&self) -> Option<HeartbeatInbox> {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The image as applied on this node.
    pub fn image(&self) -> Arc<Image> {
        self.image.borrow().clone()
    }

    /// A receiver that sees every newly applied image.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Image>> {
        self.image.clone()
    }

    /// Waits until this node's image includes log index `index` (e.g. one returned by
    /// [`Controller::propose`] on another node).
    pub async fn wait_applied(
        &self,
        index: u64,
        timeout: Duration,
    ) -> Result<Arc<Image>, ClusterError> {
        let mut rx = self.image.clone();
        let result = match tokio::time::timeout(
            timeout,
            rx.wait_for(|img| img.applied_index >= index),
        )
        .await
        {
            Ok(Ok(img)) => Ok(img.clone()),
            Ok(Err(_)) => Err(ClusterError::Raft("the controller stopped".into())),
            Err(_) => Err(ClusterError::Network(format!(
                "index {index} not applied within {timeout:?}"
            ))),
        };
        result
    }

    /// The current leader as this node knows it.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    /// Waits until this node knows a leader, and returns it.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64, ClusterError> {
        let mut rx = self.raft.metrics();
        let result = match tokio::time::timeout(
            timeout,
            rx.wait_for(|m| m.current_leader.is_some()),
        )
        .await
        {
            Ok(Ok(m)) => m
                .current_leader
                .ok_or_else(|| ClusterError::Raft("leader vanished".into())),
            Ok(Err(_)) => Err(ClusterError::Raft("the controller stopped".into())),
            Err(_) => Err(ClusterError::NotController {
                leader: None,
                leader_addr: None,
            }),
        };
        result
    }

    /// Raft metrics: role, term, leader, last log and applied index, snapshot, purged.
    pub fn metrics(&self) -> watch::Receiver<Metrics> {
        self.raft.metrics()
    }

    /// Builds a snapshot now (openraft also builds them every `snapshot_after_entries`) and
    /// purges the log behind it, keeping `entries_kept_after_snapshot`.
    pub async fn trigger_snapshot(&self) -> Result<(), ClusterError> {
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| ClusterError::Raft(e.to_string()))
    }

    /// Stops the node: its peers' connections, the listener, and the Raft core.
    pub async fn shutdown(mut self) {
        self.progress_task.abort();
        if let Some(server) = self.server.take() {
            server.abort();
            let _ = server.await;
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "controller raft core did not stop cleanly");
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.progress_task.abort();
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// Tells `progress` this node's log end offset whenever the metrics show it leading.
async fn track_leader_log_end(
    mut metrics: watch::Receiver<Metrics>,
    progress: Arc<QuorumProgress>,
) {
    loop {
        {
            let m = metrics.borrow_and_update();
            if m.current_leader == Some(m.id) {
                let end = m.last_log_index.map_or(0, |i| (i as i64).saturating_add(1));
                progress.leader_log_end(m.current_term, end);
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

fn committed((index, result): (u64, ApplyResult)) -> Result<Committed, ClusterError> {
    match result {
        Ok(applied) => Ok(Committed { index, applied }),
        Err(e) => Err(ClusterError::Rejected(e)),
    }
}

/// Binds `addr`, retrying for a while if a previous incarnation of this node still holds it.
async fn bind_retrying(addr: &str) -> Result<TcpListener, ClusterError> {
    let mut last = None;
    for _ in 0..50 {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(ClusterError::Network(format!("bind {addr}: {e}"))),
        }
    }
    Err(ClusterError::Network(format!(
        "bind {addr}: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}
