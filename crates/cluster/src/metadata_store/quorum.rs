//! The controller as the broker's synchronous metadata code sees it.
//!
//! The [`Controller`] runs on a small runtime of its own ("ferry-controller" threads), so a
//! caller may wait for a commit from anywhere: a request handler on the broker's multi-threaded
//! runtime (the wait is wrapped in `block_in_place`), a `current_thread` runtime (tests), or a
//! plain thread. The wait never depends on the caller's runtime making progress.
//!
//! Reads are a `watch` borrow of the applied image and never block. Async callers (the
//! liveness tasks) use the `*_async` forms, which run on the controller runtime too and only
//! await a channel on the caller's.
//!
//! A [`Quorum::Local`] is a quorum of one without Raft, a log or a runtime: it applies each
//! record to its image at once. It keeps nothing across restarts, answers no heartbeats, and
//! exists so that tests can build a broker without a controller.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::raft::QuorumInfo;
use crate::{
    BrokerHeartbeat, ClusterError, Committed, Controller, ControllerConfig, HeartbeatError,
    HeartbeatInbox, HeartbeatReply, Image, MetadataRecord,
};
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::sync::watch;

/// How long start-up waits for the quorum to elect a leader.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How long a caller waits for a proposal to be applied locally after it committed.
const APPLY_WAIT: Duration = Duration::from_secs(30);

/// The metadata quorum a broker writes through: the Raft controller, or a local image.
pub enum Quorum {
    Raft(RaftQuorum),
    Local(LocalQuorum),
}

impl Quorum {
    /// The image as applied on this node.
    pub fn image(&self) -> Arc<Image> {
        match self {
            Quorum::Raft(q) => q.image(),
            Quorum::Local(q) => q.publish.borrow().clone(),
        }
    }

    /// A receiver that sees every newly applied image.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Image>> {
        match self {
            Quorum::Raft(q) => q.subscribe(),
            Quorum::Local(q) => q.publish.subscribe(),
        }
    }

    /// Commits `record` and returns once this node's image includes it.
    pub fn propose(&self, record: MetadataRecord) -> Result<Committed, ClusterError> {
        match self {
            Quorum::Raft(q) => q.propose(record),
            Quorum::Local(q) => q.apply(record),
        }
    }

    /// [`Quorum::propose`] for async callers.
    pub async fn propose_async(&self, record: MetadataRecord) -> Result<Committed, ClusterError> {
        match self {
            Quorum::Raft(q) => q.propose_async(record).await,
            Quorum::Local(q) => q.apply(record),
        }
    }

    /// Proposes `records` all at once (the quorum commits them in a few batches rather than
    /// one round trip each) and returns each one's outcome, in order, once each is committed
    /// and applied on this node.
    pub async fn propose_each_async(
        &self,
        records: Vec<MetadataRecord>,
    ) -> Vec<Result<Committed, ClusterError>> {
        match self {
            Quorum::Raft(q) => q.propose_each_async(records).await,
            Quorum::Local(q) => records.into_iter().map(|r| q.apply(r)).collect(),
        }
    }

    /// Sends a broker heartbeat to the active controller.
    pub async fn heartbeat(
        &self,
        request: BrokerHeartbeat,
        ttl: Duration,
    ) -> Result<HeartbeatReply, HeartbeatError> {
        match self {
            Quorum::Raft(q) => q.heartbeat(request, ttl).await,
            Quorum::Local(_) => Err(HeartbeatError::Unavailable(
                "a local metadata quorum has no controller to heartbeat to".into(),
            )),
        }
    }

    /// The quorum as its leader describes it; `None` for a local quorum, which has no Raft.
    pub async fn describe(&self) -> Option<Result<QuorumInfo, ClusterError>> {
        match self {
            Quorum::Raft(q) => Some(q.describe().await),
            Quorum::Local(_) => None,
        }
    }

    /// The heartbeats sent to this voter (once).
    pub fn take_heartbeats(&self) -> Option<HeartbeatInbox> {
        match self {
            Quorum::Raft(q) => q.take_heartbeats(),
            Quorum::Local(_) => None,
        }
    }

    /// Whether this node is the active controller (a local quorum is its own).
    pub fn is_leader(&self) -> bool {
        match self {
            Quorum::Raft(q) => q.is_leader(),
            Quorum::Local(_) => true,
        }
    }

    /// Stops the controller cleanly (idempotent).
    pub fn shutdown(&self) {
        if let Quorum::Raft(q) = self {
            q.shutdown();
        }
    }
}

/// A quorum of one without Raft: records are applied to the image as they are proposed.
pub struct LocalQuorum {
    publish: watch::Sender<Arc<Image>>,
    /// Serialises proposals, as the Raft log orders them.
    apply: Mutex<()>,
}

impl LocalQuorum {
    pub fn new() -> Self {
        Self {
            publish: watch::Sender::new(Arc::new(Image::default())),
            apply: Mutex::new(()),
        }
    }

    fn apply(&self, record: MetadataRecord) -> Result<Committed, ClusterError> {
        let _order = self.apply.lock().unwrap_or_else(|p| p.into_inner());
        let mut image = Image::clone(&self.publish.borrow());
        image.applied_index += 1;
        let index = image.applied_index;
        let applied = image.apply(&record)?;
        self.publish.send_replace(Arc::new(image));
        Ok(Committed { index, applied })
    }
}

impl Default for LocalQuorum {
    fn default() -> Self {
        Self::new()
    }
}

/// The Raft controller on a runtime of its own.
pub struct RaftQuorum {
    handle: Handle,
    runtime: Mutex<Option<Runtime>>,
    controller: Mutex<Option<Arc<Controller>>>,
    image: watch::Receiver<Arc<Image>>,
}

impl RaftQuorum {
    /// Starts the controller from `config` and waits until the quorum has a leader.
    pub fn start(config: ControllerConfig) -> Result<Self, ClusterError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ferry-controller")
            .enable_all()
            .build()
            .map_err(|e| ClusterError::Raft(format!("cannot start the controller runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let controller = wait_on(&handle, async move {
            let controller = Controller::start_with(config, None).await?;
            controller.wait_for_leader(LEADER_WAIT).await?;
            Ok::<_, ClusterError>(controller)
        })??;
        let image = controller.subscribe();
        Ok(Self {
            handle,
            runtime: Mutex::new(Some(runtime)),
            controller: Mutex::new(Some(Arc::new(controller))),
            image,
        })
    }

    /// The image as applied on this node.
    pub fn image(&self) -> Arc<Image> {
        self.image.borrow().clone()
    }

    /// A receiver that sees every newly applied image.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Image>> {
        self.image.clone()
    }

    /// Commits `record` and returns once this node's image includes it.
    pub fn propose(&self, record: MetadataRecord) -> Result<Committed, ClusterError> {
        let controller = self.controller()?;
        wait_on(&self.handle, async move {
            let committed = controller.propose(record).await?;
            controller.wait_applied(committed.index, APPLY_WAIT).await?;
            Ok(committed)
        })?
    }

    fn controller(&self) -> Result<Arc<Controller>, ClusterError> {
        self.controller
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(stopped)
    }

    /// [`RaftQuorum::propose`] for async callers.
    pub async fn propose_async(&self, record: MetadataRecord) -> Result<Committed, ClusterError> {
        let controller = self.controller()?;
        run_on(&self.handle, async move {
            let committed = controller.propose(record).await?;
            controller.wait_applied(committed.index, APPLY_WAIT).await?;
            Ok(committed)
        })
        .await?
    }

    /// [`Quorum::propose_each_async`]: every proposal starts on the controller runtime before
    /// the first outcome is awaited.
    pub async fn propose_each_async(
        &self,
        records: Vec<MetadataRecord>,
    ) -> Vec<Result<Committed, ClusterError>> {
        let controller = match self.controller() {
            Ok(c) => c,
            Err(_) => return records.iter().map(|_| Err(stopped())).collect(),
        };
        let pending: Vec<_> = records
            .into_iter()
            .map(|record| {
                let controller = controller.clone();
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.handle.spawn(async move {
                    let outcome = async {
                        let committed = controller.propose(record).await?;
                        controller.wait_applied(committed.index, APPLY_WAIT).await?;
                        Ok(committed)
                    };
                    let _ = tx.send(outcome.await);
                });
                rx
            })
            .collect();
        let mut out = Vec::with_capacity(pending.len());
        for rx in pending {
            out.push(rx.await.unwrap_or_else(|_| Err(stopped())));
        }
        out
    }

    /// Sends a broker heartbeat to the active controller.
    pub async fn heartbeat(
        &self,
        request: BrokerHeartbeat,
        ttl: Duration,
    ) -> Result<HeartbeatReply, HeartbeatError> {
        let controller = self
            .controller()
            .map_err(|e| HeartbeatError::Unavailable(e.to_string()))?;
        run_on(&self.handle, async move {
            controller.heartbeat(request, ttl).await
        })
        .await
        .map_err(|e| HeartbeatError::Unavailable(e.to_string()))?
    }

    /// The quorum as its leader describes it (asked of the leader when this node follows).
    pub async fn describe(&self) -> Result<QuorumInfo, ClusterError> {
        let controller = self.controller()?;
        run_on(
            &self.handle,
            async move { controller.describe_quorum().await },
        )
        .await?
    }

    /// The heartbeats sent to this voter (once).
    pub fn take_heartbeats(&self) -> Option<HeartbeatInbox> {
        self.controller().ok()?.take_heartbeats()
    }

    /// Whether this node is the Raft leader, i.e. the active controller.
    pub fn is_leader(&self) -> bool {
        self.controller().is_ok_and(|c| c.is_leader())
    }

    /// Stops the controller cleanly (idempotent). Blocks until its Raft core has stopped.
    pub fn shutdown(&self) {
        let controller = self
            .controller
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(runtime) = runtime else {
            return;
        };
        // A runtime may be neither blocked on nor dropped inside another runtime's task: do
        // both on a thread of our own.
        let stopper = std::thread::Builder::new()
            .name("ferry-controller-stop".into())
            .spawn(move || {
                if let Some(controller) = controller {
                    match Arc::try_unwrap(controller) {
                        Ok(c) => runtime.block_on(c.shutdown()),
                        // A proposal is still in flight; dropping stops the listener, and
                        // shutting the runtime down below stops the rest.
                        Err(c) => drop(c),
                    }
                }
                runtime.shutdown_timeout(Duration::from_secs(5));
            });
        match stopper {
            Ok(t) => {
                if t.join().is_err() {
                    tracing::warn!("controller shutdown thread panicked");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot spawn the controller shutdown thread"),
        }
    }
}

impl Drop for RaftQuorum {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn stopped() -> ClusterError {
    ClusterError::Raft("the controller has stopped".into())
}

/// Runs `fut` on the controller runtime; the caller only awaits its output.
async fn run_on<T: Send + 'static>(
    handle: &Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, ClusterError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.await.map_err(|_| stopped())
}

/// Runs `fut` on the controller runtime and waits for its output from any kind of thread.
fn wait_on<T: Send + 'static>(
    handle: &Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, ClusterError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let wait = move || rx.recv().map_err(|_| stopped());
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}
