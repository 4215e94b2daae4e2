//! The controller transport: length-prefixed JSON over TCP, or over TLS with client
//! certificates both ways ([`super::transport`]).
//!
//! A frame is `[len: u32 BE][JSON]`; each connection carries one request, then its response, at a
//! time. A client keeps one connection per peer and opens a new one after any error (a failed
//! call is never retried on the same connection, so a late response can't be taken for the
//! next one's). Frames over [`MAX_FRAME`] are refused as corrupt.
//!
//! Besides openraft's three RPCs the transport carries `Propose`, which a follower uses to hand a
//! client's record to the leader. The leader applies it with `client_write` and does not forward
//! again, so a request travels at most one hop. It also carries broker heartbeats
//! ([`super::heartbeat`]), answered by the receiving voter's liveness task, and
//! `DescribeQuorum`, which only the leader answers ([`super::describe`]).
//!
//! Every successful AppendEntries answer is told to the [`QuorumProgress`] (when set), which
//! is how the leader knows when each voter last "fetched".

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::describe::{self, QuorumInfo};
use super::heartbeat::{self, BrokerHeartbeat, HeartbeatCall, HeartbeatError, HeartbeatReply};
use super::quorum_progress::QuorumProgress;
use super::state_machine::ApplyResult;
use super::transport::{self, QuorumStream, QuorumTls};
use super::{Node, Raft, TypeConfig};
use crate::image::MetadataRecord;

/// The largest frame accepted (snapshots travel in chunks well below this).
pub const MAX_FRAME: u32 = 64 << 20;

/// Told the bytes of every controller frame this node sends or receives, with the peer's node
/// id where the frame names it (`None` for a forwarded proposal, which carries no sender). The
/// broker turns this into its inter-broker traffic by rack; the cluster crate knows no racks.
#[derive(Clone)]
pub struct TrafficObserver(Arc<dyn Fn(Option<u64>, Traffic) + Send + Sync>);

/// Bytes of one exchange with a peer, frame headers included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub sent: u64,
    pub received: u64,
}

impl TrafficObserver {
    pub fn new(f: impl Fn(Option<u64>, Traffic) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    fn observe(&self, peer: Option<u64>, traffic: Traffic) {
        (self.0)(peer, traffic)
    }
}

impl std::fmt::Debug for TrafficObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrafficObserver")
    }
}

#[derive(Serialize, Deserialize)]
enum Request {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Propose(MetadataRecord),
    Heartbeat(BrokerHeartbeat),
    DescribeQuorum,
}

/// Why a forwarded proposal failed on the receiving node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ProposeFailure {
    NotLeader {
        leader: Option<u64>,
        leader_addr: Option<String>,
    },
    Raft(String),
}

#[derive(Serialize, Deserialize)]
enum Response {
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    Propose(Result<(u64, ApplyResult), ProposeFailure>),
    Heartbeat(Result<HeartbeatReply, HeartbeatError>),
    DescribeQuorum(Result<QuorumInfo, ProposeFailure>),
}

#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The peer accepted a new connection and then failed the first call on it: it is down,
    /// restarting, or something else holds its port.
    #[error("{addr} failed a call on a new connection: {source}")]
    FreshConnectionFailed {
        addr: String,
        source: std::io::Error,
    },
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("unexpected response type")]
    Mismatch,
}

/// Writes one frame and returns its size in bytes.
async fn write_frame<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    value: &impl Serialize,
) -> std::io::Result<u64> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&body).await?;
    w.flush().await?;
    Ok(4 + u64::from(len))
}

/// Reads one frame and its size in bytes; `Ok(None)` on a clean end of stream before a frame
/// starts.
async fn read_frame<R, T>(r: &mut R) -> std::io::Result<Option<(T, u64)>>
where
    R: AsyncReadExt + Unpin,
    T: serde::de::DeserializeOwned,
{
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the limit"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(|v| Some((v, 4 + u64::from(len))))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// One peer's connection, opened on first use.
struct Connection {
    addr: String,
    stream: Option<BufStream<QuorumStream>>,
    /// The peer's node id, for the traffic observer.
    peer: Option<u64>,
    observer: Option<TrafficObserver>,
    /// Set when the quorum speaks TLS.
    tls: Option<QuorumTls>,
}

impl Connection {
    async fn call(&mut self, req: &Request, ttl: Duration) -> Result<Response, CallError> {
        let result = tokio::time::timeout(ttl, self.call_inner(req)).await;
        let result = match result {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout(ttl)),
        };
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    async fn call_inner(&mut self, req: &Request) -> Result<Response, CallError> {
        let fresh = self.stream.is_none();
        match self.exchange(req).await {
            Err(CallError::Io(source)) if fresh => Err(CallError::FreshConnectionFailed {
                addr: self.addr.clone(),
                source,
            }),
            other => other,
        }
    }

    async fn exchange(&mut self, req: &Request) -> Result<Response, CallError> {
        if self.stream.is_none() {
            // A failed TLS handshake counts as a failed connect: openraft backs off.
            let s = transport::connect(&self.addr, self.tls.as_ref())
                .await
                .map_err(|source| CallError::Connect {
                    addr: self.addr.clone(),
                    source,
                })?;
            self.stream = Some(BufStream::new(s));
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(CallError::Mismatch);
        };
        let sent = write_frame(stream, req).await?;
        let response = read_frame(stream).await;
        let received = match &response {
            Ok(Some((_, n))) => *n,
            _ => 0,
        };
        if let Some(o) = &self.observer {
            o.observe(self.peer, Traffic { sent, received });
        }
        match response? {
            Some((resp, _)) => Ok(resp),
            None => Err(CallError::Io(std::io::ErrorKind::UnexpectedEof.into())),
        }
    }
}

/// How this node reaches its peers: the traffic observer and, when the quorum speaks TLS, its
/// configs. Creates a [`PeerClient`] per target, as openraft asks, and the one-off connections
/// of forwarded proposals and heartbeats.
#[derive(Clone, Default)]
pub struct TcpNetwork {
    pub(crate) observer: Option<TrafficObserver>,
    pub(crate) tls: Option<QuorumTls>,
    /// Told every voter's successful AppendEntries answer.
    pub(crate) progress: Option<Arc<QuorumProgress>>,
}

impl TcpNetwork {
    /// A connection to `addr` (node `peer`, when known), opened on first use.
    fn connection(&self, addr: String, peer: Option<u64>) -> Connection {
        Connection {
            addr,
            stream: None,
            peer,
            observer: self.observer.clone(),
            tls: self.tls.clone(),
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &Node) -> PeerClient {
        PeerClient {
            target,
            conn: self.connection(node.addr.clone(), Some(target)),
            progress: self.progress.clone(),
        }
    }
}

/// Sends openraft's RPCs to one peer.
pub struct PeerClient {
    target: u64,
    conn: Connection,
    progress: Option<Arc<QuorumProgress>>,
}

fn rpc_error<E: std::error::Error>(e: CallError) -> RPCError<u64, Node, E> {
    match e {
        // Unreachable makes openraft back off before the next try; any other error is retried
        // at once, which against a peer that closes every connection is a busy loop.
        CallError::Connect { .. } | CallError::FreshConnectionFailed { .. } => {
            RPCError::Unreachable(Unreachable::new(&e))
        }
        other => RPCError::Network(NetworkError::new(&other)),
    }
}

impl PeerClient {
    async fn send(&mut self, req: Request, option: &RPCOption) -> Result<Response, CallError> {
        self.conn.call(&req, option.hard_ttl()).await
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, Node, RaftError<u64>>> {
        let term = rpc.vote.leader_id().get_term();
        let sent_to = rpc
            .entries
            .last()
            .map(|e| e.log_id.index)
            .or(rpc.prev_log_id.map(|l| l.index));
        match self.send(Request::AppendEntries(rpc), &option).await {
            Ok(Response::AppendEntries(Ok(r))) => {
                let held = match &r {
                    AppendEntriesResponse::Success => Some(sent_to),
                    AppendEntriesResponse::PartialSuccess(matched) => {
                        Some(matched.map(|l| l.index))
                    }
                    _ => None,
                };
                if let (Some(held), Some(progress)) = (held, &self.progress) {
                    let end = held.map_or(0, |i| (i as i64).saturating_add(1));
                    progress.acknowledged(term, self.target, end);
                }
                Ok(r)
            }
            Ok(Response::AppendEntries(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(rpc_error(CallError::Mismatch)),
            Err(e) => Err(rpc_error(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, Node, RaftError<u64, InstallSnapshotError>>,
    > {
        match self.send(Request::InstallSnapshot(rpc), &option).await {
            Ok(Response::InstallSnapshot(Ok(r))) => Ok(r),
            Ok(Response::InstallSnapshot(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(rpc_error(CallError::Mismatch)),
            Err(e) => Err(rpc_error(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, Node, RaftError<u64>>> {
        match self.send(Request::Vote(rpc), &option).await {
            Ok(Response::Vote(Ok(r))) => Ok(r),
            Ok(Response::Vote(Err(e))) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(rpc_error(CallError::Mismatch)),
            Err(e) => Err(rpc_error(e)),
        }
    }
}

/// Sends `record` to the controller at `addr` and waits for it to be committed and applied.
pub(crate) async fn forward_propose(
    addr: &str,
    peer: Option<u64>,
    record: MetadataRecord,
    ttl: Duration,
    network: &TcpNetwork,
) -> Result<Result<(u64, ApplyResult), ProposeFailure>, String> {
    let mut conn = network.connection(addr.to_string(), peer);
    match conn.call(&Request::Propose(record), ttl).await {
        Ok(Response::Propose(r)) => Ok(r),
        Ok(_) => Err("unexpected response type".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Sends a broker heartbeat to the controller at `addr` and waits for its answer.
pub(crate) async fn forward_heartbeat(
    addr: &str,
    peer: Option<u64>,
    request: BrokerHeartbeat,
    ttl: Duration,
    network: &TcpNetwork,
) -> Result<HeartbeatReply, HeartbeatError> {
    let mut conn = network.connection(addr.to_string(), peer);
    match conn.call(&Request::Heartbeat(request), ttl).await {
        Ok(Response::Heartbeat(r)) => r,
        Ok(_) => Err(HeartbeatError::Unavailable(
            "unexpected response type".into(),
        )),
        Err(e) => Err(HeartbeatError::Unavailable(e.to_string())),
    }
}

/// Asks the controller at `addr` to describe the quorum (it answers only if it leads).
pub(crate) async fn forward_describe_quorum(
    addr: &str,
    peer: Option<u64>,
    ttl: Duration,
    network: &TcpNetwork,
) -> Result<Result<QuorumInfo, ProposeFailure>, String> {
    let mut conn = network.connection(addr.to_string(), peer);
    match conn.call(&Request::DescribeQuorum, ttl).await {
        Ok(Response::DescribeQuorum(r)) => Ok(r),
        Ok(_) => Err("unexpected response type".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Applies a proposal on this node only (no further forwarding).
pub(crate) async fn propose_local(
    raft: &Raft,
    record: MetadataRecord,
) -> Result<(u64, ApplyResult), ProposeFailure> {
    use openraft::error::ClientWriteError;
    match raft.client_write(record).await {
        Ok(resp) => Ok((resp.log_id.index, resp.data)),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            Err(ProposeFailure::NotLeader {
                leader: f.leader_id,
                leader_addr: f.leader_node.map(|n| n.addr),
            })
        }
        Err(e) => Err(ProposeFailure::Raft(e.to_string())),
    }
}

/// Accepts peers' connections on `listener` (completing a TLS handshake first when `tls` is
/// set) and answers their requests with `raft`, until the returned task is aborted (which also
/// ends every connection it serves).
pub(crate) fn serve(
    listener: TcpListener,
    raft: Raft,
    network: TcpNetwork,
    heartbeats: tokio::sync::mpsc::Sender<HeartbeatCall>,
) -> tokio::task::JoinHandle<()> {
    let TcpNetwork {
        observer,
        tls,
        progress,
    } = network;
    tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let raft = raft.clone();
                        let observer = observer.clone();
                        let heartbeats = heartbeats.clone();
                        let tls = tls.clone();
                        let progress = progress.clone();
                        connections.spawn(async move {
                            // The handshake runs here, not in the accept loop: a slow peer
                            // holds up only its own connection.
                            let stream = match transport::accept(stream, tls.as_ref()).await {
                                Ok(s) => s,
                                Err(e) => {
                                    tracing::info!(%peer, error = %e, "controller connection dropped before its first request");
                                    return;
                                }
                            };
                            if let Err(e) = handle_connection(stream, raft, observer, heartbeats, progress).await {
                                tracing::debug!(%peer, error = %e, "controller connection closed");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "controller listener accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    })
}

async fn handle_connection(
    stream: QuorumStream,
    raft: Raft,
    observer: Option<TrafficObserver>,
    heartbeats: tokio::sync::mpsc::Sender<HeartbeatCall>,
    progress: Option<Arc<QuorumProgress>>,
) -> std::io::Result<()> {
    let mut stream = BufStream::new(stream);
    while let Some((req, received)) = read_frame::<_, Request>(&mut stream).await? {
        // The sender as the request names it: the leader of an append or snapshot, the
        // candidate of a vote, the broker of a heartbeat.
        let peer = match &req {
            Request::AppendEntries(r) => Some(r.vote.leader_id().voted_for()),
            Request::Vote(r) => Some(r.vote.leader_id().voted_for()),
            Request::InstallSnapshot(r) => Some(r.vote.leader_id().voted_for()),
            Request::Propose(_) | Request::DescribeQuorum => None,
            // Combined nodes: a broker's id is its voter id.
            Request::Heartbeat(hb) => Some(u64::try_from(hb.broker_id).ok()),
        }
        .flatten();
        let resp = match req {
            Request::AppendEntries(r) => Response::AppendEntries(raft.append_entries(r).await),
            Request::Vote(r) => Response::Vote(raft.vote(r).await),
            Request::InstallSnapshot(r) => {
                Response::InstallSnapshot(raft.install_snapshot(r).await)
            }
            Request::Propose(record) => Response::Propose(propose_local(&raft, record).await),
            Request::Heartbeat(hb) => {
                let leader = raft.metrics().borrow().current_leader;
                Response::Heartbeat(heartbeat::deliver(&heartbeats, hb, leader).await)
            }
            Request::DescribeQuorum => Response::DescribeQuorum(match &progress {
                Some(p) => describe::describe_local(&raft, p).await,
                None => Err(ProposeFailure::Raft("no quorum progress kept".into())),
            }),
        };
        let sent = write_frame(&mut stream, &resp).await?;
        if let Some(o) = &observer {
            o.observe(peer, Traffic { sent, received });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, Vote};

    fn append_entries() -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            entries: vec![],
            leader_commit: Some(openraft::LogId::new(CommittedLeaderId::new(1, 1), 0)),
        }
    }

    fn client(addr: String) -> PeerClient {
        PeerClient {
            target: 2,
            conn: Connection {
                addr,
                stream: None,
                peer: Some(2),
                observer: None,
                tls: None,
            },
            progress: None,
        }
    }

    /// A port taken by something that is not a voter (here: a listener that closes every
    /// connection, as a Kafka listener does with our frames) must make openraft back off, not
    /// retry in a busy loop.
    #[tokio::test]
    async fn a_peer_that_closes_each_new_connection_is_unreachable() {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("bind: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a.to_string(),
            Err(e) => panic!("local_addr: {e}"),
        };
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                drop(s);
            }
        });
        let mut c = client(addr);
        let option = RPCOption::new(Duration::from_secs(5));
        for _ in 0..3 {
            let r = c.append_entries(append_entries(), option.clone()).await;
            assert!(
                matches!(r, Err(RPCError::Unreachable(_))),
                "expected Unreachable, got {r:?}"
            );
        }
    }
}
