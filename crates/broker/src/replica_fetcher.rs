//! How bytes reach a follower: the seam [`ReplicaFetcher`], and its classic implementation
//! [`ClassicFetcher`], which fetches from the leader with the Fetch API (as Kafka's replica
//! fetcher threads do). It knows the partitions it is given, a [`PeerClient`] and its settings
//! ([`FetcherContext`]); what the remote WAL wants to learn from it goes through the replica
//! manager's [`ReplicationObserver`], so this module names neither the broker nor the WAL.
//!
//! [`ClassicFetcher`] runs one task per leader broker. Each round sends one Fetch (v12, topic
//! names, in an incremental fetch session: [`ferry_replication::follower_session`]) with `replica_id` = this
//! broker for every partition this broker follows on that leader, from its log end offset and with the epoch of its last batch; the leader answers
//! with records (appended as they are, [`Partition::append_fetched`]), its high watermark
//! (the follower's becomes min(leader HW, own LEO)), its log start offset (the follower's moves
//! up to it, deleting whole segments below, so DeleteRecords and retention reach followers), or a
//! diverging epoch (KIP-595/KIP-320): the
//! follower's log has batches the leader does not, and is truncated to the leader's epoch
//! boundary before fetching again. OFFSET_OUT_OF_RANGE with a leader log start offset past the
//! follower's end (the leader deleted what the follower never fetched) restarts the follower's
//! log, empty, there (Kafka's `truncateFullyAndStartAt`).
//!
//! A tiered partition's leader answers a fetch below its local log start, but within the log,
//! OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405): the follower does not copy what the tier holds.
//! It asks the leader for its local log start (ListOffsets EARLIEST_LOCAL_TIMESTAMP, with the
//! leader epoch it follows), takes from the tier ([`TierAuxSource`]) the leader-epoch
//! checkpoint and producer snapshot of the segment holding the offset just below it, restarts
//! its log, empty, at that segment's end with them, and fetches from there (Kafka's
//! `ReplicaFetcherTierStateMachine`).
//!
//! Each leader has two lanes, each a task running the same loop over the partitions whose
//! wal-mode flag ([`Partition::wal_mode`], set by the remote WAL glue) selects it:
//! [`Lane::Classic`] long-polls for records as above; [`Lane::Wal`] is for partitions whose data
//! comes through the remote WAL: it only reports the log end offset (partition max bytes 0, no
//! wait) right after the log end moved, so that the leader's high watermark and acks=all follow
//! the WAL path with no long-poll in the way. Between reports it long-polls for the high
//! watermark instead, when the leader's is still below what this follower reported for every
//! partition of the lane (the other followers have not reported it yet): the leader answers as
//! soon as a high watermark moves, so consumers reading from this follower (KIP-392) see new
//! records without waiting for the next WAL append. Such a long-poll never holds back a report
//! that matters: while every high watermark is below this follower's reported log end, other
//! replicas are the ones they wait for, and the moment one reaches the reported end is the
//! moment the long-poll returns. Otherwise a report goes out every `replica.fetch.wait.max.ms`. The leader may still answer a report with
//! records when it finds the follower behind the WAL path.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::replication_throttle::Side;
use ferry_cluster::BrokerId;
use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::{BrokerId as WireBrokerId, FetchRequest, FetchResponse};
use tokio::task::JoinHandle;

use crate::inter_broker::{Connection, PeerClient};
use crate::replica_manager::{Partition, ReplicationObserver, Role};
use ferry_metrics::{inter_broker_client_id, TrafficKind, PURPOSE_REPLICA_FETCHER};
use ferry_replication::follower_session::{FollowerSession, SessionRequest, Wanted};

/// Back-off after a failed round (connection error, leader not ready).
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// The one way the replica manager makes a follower's log follow its leader.
pub trait ReplicaFetcher: Send + Sync {
    /// Makes the fetcher follow exactly `followed`: the partitions this broker follows now (by
    /// the replica manager's roles), each fetched from its leader. Called after every change of
    /// the metadata image.
    fn sync(&self, followed: Vec<Arc<Partition>>);
    /// Stops every fetch task.
    fn shutdown(&self);
}

/// The follower's side of Fetch, as the broker's config sets it.
#[derive(Debug, Clone, Copy)]
pub struct FetcherSettings {
    /// `replica.fetch.wait.max.ms`.
    pub wait_max_ms: i32,
    /// `replica.fetch.max.bytes` (per partition).
    pub partition_max_bytes: i32,
    /// `fetch.max.bytes` (per request).
    pub max_bytes: usize,
}

/// What a follower of a tiered partition takes from the long-term tier to start its log at a
/// remote segment's end (Kafka's `buildRemoteLogAuxState`).
#[derive(Debug, Clone, PartialEq)]
pub struct TierAuxState {
    /// Where the follower's log starts: the segment's end offset plus one.
    pub next_offset: i64,
    /// The segment's leader-epoch checkpoint: every epoch up to the segment's end.
    pub epochs: Vec<(i32, i64)>,
    /// The producer snapshot at the segment's end, if one was copied with it.
    pub producer_snapshot: Option<bytes::Bytes>,
}

/// The long-term tier as the replica fetcher needs it.
pub trait TierAuxSource: Send + Sync {
    /// The state at the end of the tier's segment of `partition` that holds `offset` under a
    /// leader epoch no later than `max_epoch` (the leader's epoch at the offset after it);
    /// `Ok(None)` when the tier holds no such segment.
    fn aux_state<'a>(
        &'a self,
        partition: &'a Partition,
        offset: i64,
        max_epoch: i32,
    ) -> futures::future::BoxFuture<'a, anyhow::Result<Option<TierAuxState>>>;
}

/// What the fetch tasks need besides their partitions.
pub struct FetcherContext {
    /// This broker (the `replica_id` of its fetches).
    pub node_id: BrokerId,
    pub peers: PeerClient,
    pub settings: FetcherSettings,
    /// Told of classic appends and of answered WAL-progress reports.
    pub observer: Arc<dyn ReplicationObserver>,
    /// Follower-side replication throttles (KIP-73).
    pub throttles: Arc<crate::replication_throttle::ReplicationThrottles>,
    pub metrics: Arc<ferry_metrics::Metrics>,
    /// The long-term tier, with `remote.log.storage.system.enable`: followers of tiered
    /// partitions start from it (OFFSET_MOVED_TO_TIERED_STORAGE).
    pub tier: Option<Arc<dyn TierAuxSource>>,
}

/// Classic replication: followers fetch from the leader's Kafka listener.
pub struct ClassicFetcher {
    /// Tasks hold it weakly: they end when the fetcher (so the broker) is gone.
    context: Arc<FetcherContext>,
    tasks: Mutex<HashMap<(BrokerId, Lane), LeaderTask>>,
}

impl ClassicFetcher {
    pub fn new(context: FetcherContext) -> Self {
        Self {
            context: Arc::new(context),
            tasks: Mutex::default(),
        }
    }
}

/// Which partitions of a leader a fetch task serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Records by long-polling Fetch.
    Classic,
    /// Offsets-only reports for remote-WAL partitions.
    Wal,
}

impl Lane {
    fn serves(self, p: &Partition) -> bool {
        p.wal_mode() == (self == Lane::Wal)
    }
}

/// How long an idle lane waits before looking at its partitions' flags again.
const IDLE_WAIT: Duration = Duration::from_millis(50);

struct LeaderTask {
    partitions: Arc<Mutex<BTreeMap<TopicPartition, Arc<Partition>>>>,
    handle: JoinHandle<()>,
}

impl ReplicaFetcher for ClassicFetcher {
    fn sync(&self, followed: Vec<Arc<Partition>>) {
        let mut wanted: HashMap<BrokerId, BTreeMap<TopicPartition, Arc<Partition>>> =
            HashMap::new();
        for p in followed {
            if let Role::Follower { leader } = p.role() {
                if leader >= 0 && leader != self.context.node_id {
                    wanted.entry(leader).or_default().insert(p.tp.clone(), p);
                }
            }
        }
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|(leader, _), task| {
            let keep = wanted.contains_key(leader) && !task.handle.is_finished();
            if !keep {
                task.handle.abort();
            }
            keep
        });
        for (leader, partitions) in wanted {
            for lane in [Lane::Classic, Lane::Wal] {
                match tasks.get(&(leader, lane)) {
                    Some(task) => {
                        *task.partitions.lock().unwrap_or_else(|p| p.into_inner()) =
                            partitions.clone();
                    }
                    None => {
                        let shared = Arc::new(Mutex::new(partitions.clone()));
                        let handle = tokio::spawn(run_leader(
                            Arc::downgrade(&self.context),
                            leader,
                            lane,
                            shared.clone(),
                        ));
                        tasks.insert(
                            (leader, lane),
                            LeaderTask {
                                partitions: shared,
                                handle,
                            },
                        );
                    }
                }
            }
        }
    }

    fn shutdown(&self) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        for (_, task) in tasks.drain() {
            task.handle.abort();
        }
    }
}

async fn run_leader(
    context: Weak<FetcherContext>,
    leader: BrokerId,
    lane: Lane,
    partitions: Arc<Mutex<BTreeMap<TopicPartition, Arc<Partition>>>>,
) {
    let mut conn: Option<Connection> = None;
    let mut session = FollowerSession::default();
    // WAL lane: the next request long-polls for the high watermark (see the module docs).
    let mut hw_poll = false;
    // WAL lane: when the WAL path moved a log end that the next report carries.
    let mut moved_at: Option<tokio::time::Instant> = None;
    loop {
        let Some(b) = context.upgrade() else { return };
        if conn.is_none() {
            session.reset();
            match b.peers.connect(leader, TrafficKind::Replication).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::debug!(leader, error = %e, "replica fetcher cannot connect");
                    drop(b);
                    tokio::time::sleep(RETRY_BACKOFF).await;
                    continue;
                }
            }
        }
        let current: Vec<Arc<Partition>> = partitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|p| p.role() == Role::Follower { leader } && lane.serves(p))
            .filter(|p| lane == Lane::Wal || !throttled_now(&b, p))
            .cloned()
            .collect();
        if current.is_empty() {
            drop(b);
            tokio::time::sleep(IDLE_WAIT).await;
            continue;
        }
        let wanted = wanted_partitions(&b, &current, lane);
        let wait = match lane {
            Lane::Classic => Wait::LongPoll,
            Lane::Wal if hw_poll => Wait::LongPoll,
            Lane::Wal => Wait::Immediate,
        };
        let request = build_request(&b, session.request(&wanted), lane, wait);
        let reported: Vec<i64> = current.iter().map(|p| p.log.log_end_offset()).collect();
        let wait_max = Duration::from_millis(u64::try_from(b.settings.wait_max_ms).unwrap_or(500));
        let client_id = inter_broker_client_id(b.node_id, PURPOSE_REPLICA_FETCHER);
        let node_id = b.node_id;
        let Some(c) = conn.as_mut() else { continue };
        let sent_at = tokio::time::Instant::now();
        let result = c.fetch(&request, &client_id).await;
        match result {
            Ok(response) => {
                record_throttled_bytes(&b, &response);
                if session.on_response(&wanted, response.error_code, response.session_id) {
                    // The leader lost our session (restart, eviction): a full request at once.
                    continue;
                }
                let outcome =
                    handle_response(b.observer.as_ref(), leader, &current, &wanted, response);
                let mut backoff = outcome.backoff;
                for (p, sent_epoch) in outcome.moved_to_tier {
                    if let Err(e) = start_from_tier(&b, c, leader, &p, sent_epoch).await {
                        tracing::warn!(partition = %p.tp, leader, error = %e,
                            "cannot start this replica from the long-term tier; retrying");
                        backoff = true;
                    }
                }
                if let Some(at) = moved_at.take() {
                    b.observer.on_wal_progress_reported(at.elapsed());
                }
                drop(b);
                hw_poll = false;
                if backoff {
                    tokio::time::sleep(RETRY_BACKOFF).await;
                } else if lane == Lane::Wal {
                    if moved_since(&current, &reported) {
                        moved_at = Some(tokio::time::Instant::now());
                    } else if awaits_high_watermark(&current, &reported) {
                        hw_poll = true;
                    } else if wait_for_progress(&current, &reported, wait_max).await {
                        moved_at = Some(tokio::time::Instant::now());
                    }
                    // A follower catching up outside the ISR appends slice after slice; nobody
                    // waits for its reports but its own return to the ISR, so they are paced.
                    if moved_at.is_some() && only_catching_up_moved(&current, &reported, node_id) {
                        tokio::time::sleep_until(sent_at + CATCH_UP_REPORT_INTERVAL).await;
                    }
                }
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "replica fetch failed; reconnecting");
                conn = None;
                drop(b);
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
        }
    }
}

/// Classic lane: whether the follower throttle holds `p` back this round (throttled, this
/// broker outside its ISR, the follower side over `follower.replication.throttled.rate`):
/// left out of the fetch, as Kafka's fetcher leaves it out.
fn throttled_now(context: &FetcherContext, p: &Partition) -> bool {
    context.throttles.holds_back(
        Side::Follower,
        &context.metrics,
        &p.tp.topic,
        p.tp.partition,
        || p.isr().contains(&context.node_id),
    )
}

/// Counts the record bytes a response brought for follower-throttled partitions.
fn record_throttled_bytes(context: &FetcherContext, response: &FetchResponse) {
    let bytes: usize = response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
        .filter(|(t, p)| {
            context
                .throttles
                .is_throttled(Side::Follower, t.topic.as_str(), p.partition_index)
        })
        .map(|(_, p)| p.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    context
        .throttles
        .record(Side::Follower, &context.metrics, bytes as u64);
}

/// WAL lane: the shortest time between two reports while only partitions outside the ISR moved
/// (a follower back from an outage: a report after each slice it appended cost about 2.7 % of
/// its backlog in cross-zone bytes; at this pace a few hundred bytes every 100 ms).
const CATCH_UP_REPORT_INTERVAL: Duration = Duration::from_millis(100);

/// WAL lane: whether a partition's log end moved since `reported` (the WAL path appended) or a
/// partition left the lane.
fn moved_since(partitions: &[Arc<Partition>], reported: &[i64]) -> bool {
    partitions.iter().zip(reported).any(|(p, r)| moved(p, *r))
}

/// WAL lane: whether `p`'s log end moved since it was reported at `reported`, or `p` left the lane.
fn moved(p: &Partition, reported: i64) -> bool {
    p.log.log_end_offset() != reported || !p.wal_mode()
}

/// WAL lane: whether the partitions whose log end moved since `reported` all have `node_id`
/// (this follower) outside their ISR, and none left the lane: a report of them holds back no
/// acknowledgement, only this follower's return to the ISR.
fn only_catching_up_moved(
    partitions: &[Arc<Partition>],
    reported: &[i64],
    node_id: BrokerId,
) -> bool {
    partitions
        .iter()
        .zip(reported)
        .filter(|(p, r)| moved(p, **r))
        .all(|(p, _)| p.wal_mode() && !p.isr().contains(&node_id))
}

/// WAL lane: whether, for every partition, the leader's high watermark as last heard is below
/// the log end this follower reported: each will move when another follower reports, and this
/// follower's consumers want to know at once. Only then may a long-poll hold back this
/// follower's next report: while every high watermark waits for someone else, a newer log end
/// of ours changes none of them until one reaches what we reported, and that ends the poll.
/// (With one partition at its reported end, our next report may be what moves it.)
fn awaits_high_watermark(partitions: &[Arc<Partition>], reported: &[i64]) -> bool {
    !partitions.is_empty()
        && partitions
            .iter()
            .zip(reported)
            .all(|(p, r)| p.leader_high_watermark() >= 0 && p.leader_high_watermark() < *r)
}

/// WAL lane: waits until a partition's log end moved past what was reported (the WAL path
/// appended; returns true), a partition left the lane (true), or `wait_max` passed (false: a
/// report refreshes the high watermark).
async fn wait_for_progress(
    partitions: &[Arc<Partition>],
    reported: &[i64],
    wait_max: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + wait_max;
    let mut watchers: Vec<_> = partitions.iter().map(|p| p.subscribe()).collect();
    loop {
        if moved_since(partitions, reported) {
            return true;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        // Bounded: a deleted partition's channel closes, and flags change without a wake-up.
        let step = deadline.min(now + IDLE_WAIT);
        let changed =
            futures::future::select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        let _ = tokio::time::timeout_at(step, changed).await;
    }
}

/// Every partition of the round as a full fetch would list it (the session sends what changed).
fn wanted_partitions(
    context: &FetcherContext,
    partitions: &[Arc<Partition>],
    lane: Lane,
) -> Wanted {
    // WAL lane: offsets only.
    let partition_max_bytes = match lane {
        Lane::Classic => context.settings.partition_max_bytes,
        Lane::Wal => 0,
    };
    partitions
        .iter()
        .map(|p| {
            let last_fetched_epoch = p
                .log
                .epoch_entries()
                .last()
                .map(|(epoch, _)| *epoch)
                .unwrap_or(-1);
            (
                p.tp.topic.clone(),
                FetchPartition::default()
                    .with_partition(p.tp.partition)
                    .with_current_leader_epoch(p.leader_epoch())
                    .with_fetch_offset(p.log.log_end_offset())
                    .with_last_fetched_epoch(last_fetched_epoch)
                    .with_log_start_offset(p.log.log_start_offset())
                    .with_partition_max_bytes(partition_max_bytes),
            )
        })
        .collect()
}

/// Whether the leader may hold a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Answered at once (a WAL-lane report).
    Immediate,
    /// Held up to `replica.fetch.wait.max.ms` until there is news: records (classic lane), or a
    /// high watermark this follower has not been told (the leader's rule for followers).
    LongPoll,
}

fn build_request(
    context: &FetcherContext,
    session: SessionRequest,
    lane: Lane,
    wait: Wait,
) -> FetchRequest {
    let (max_wait_ms, min_bytes) = match (lane, wait) {
        (_, Wait::LongPoll) => (context.settings.wait_max_ms, 1),
        (Lane::Classic, Wait::Immediate) => (0, 1),
        (Lane::Wal, Wait::Immediate) => (0, 0),
    };
    FetchRequest::default()
        .with_replica_id(WireBrokerId(context.node_id))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(i32::try_from(context.settings.max_bytes).unwrap_or(i32::MAX))
        .with_isolation_level(0)
        .with_session_id(session.session_id)
        .with_session_epoch(session.session_epoch)
        .with_topics(session.topics)
        .with_forgotten_topics_data(session.forgotten)
}

/// Kafka's `TierStateMachine.start`: the leader's local log start (ListOffsets
/// EARLIEST_LOCAL_TIMESTAMP at the epoch followed), then the tier's state at the end of the
/// segment just below it; the log restarts there. Nothing changes when any step fails, or when
/// the partition no longer follows `leader` at `sent_epoch`.
async fn start_from_tier(
    context: &FetcherContext,
    conn: &mut Connection,
    leader: BrokerId,
    p: &Arc<Partition>,
    sent_epoch: i32,
) -> anyhow::Result<()> {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ListOffsetsRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let Some(tier) = &context.tier else {
        anyhow::bail!(
            "the leader answered OFFSET_MOVED_TO_TIERED_STORAGE, and the long-term tier is off here (remote.log.storage.system.enable)"
        );
    };
    let request = ListOffsetsRequest::default()
        .with_replica_id(WireBrokerId(context.node_id))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(p.tp.topic.clone())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(p.tp.partition)
                .with_current_leader_epoch(sent_epoch)
                .with_timestamp(crate::handlers::list_offsets::EARLIEST_LOCAL)])]);
    let client_id = inter_broker_client_id(context.node_id, PURPOSE_REPLICA_FETCHER);
    let response = conn.list_offsets(&request, &client_id).await?;
    let answer = response
        .topics
        .iter()
        .filter(|t| t.name.as_str() == p.tp.topic)
        .flat_map(|t| t.partitions.iter())
        .find(|a| a.partition_index == p.tp.partition)
        .ok_or_else(|| anyhow::anyhow!("the leader's ListOffsets answer lacks the partition"))?;
    if answer.error_code != 0 {
        anyhow::bail!(
            "the leader's earliest local offset: {:?}",
            ResponseError::try_from_code(answer.error_code)
        );
    }
    let local_start = answer.offset;
    if local_start <= 0 {
        anyhow::bail!("the leader's earliest local offset is {local_start}, nothing is tiered");
    }
    // The epoch of the local start, when the leader knows it (else: any epoch up to ours).
    let max_epoch = if answer.leader_epoch >= 0 {
        answer.leader_epoch
    } else {
        sent_epoch
    };
    let aux = tier
        .aux_state(p, local_start - 1, max_epoch)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the long-term tier holds no segment with offset {} (the leader's local log starts at {local_start})",
                local_start - 1
            )
        })?;
    if !still_follows(p, leader, sent_epoch) {
        return Ok(());
    }
    tracing::info!(partition = %p.tp, leader, leader_local_log_start = local_start,
        offset = aux.next_offset, epochs = ?aux.epochs, producer_snapshot = aux.producer_snapshot.is_some(),
        "starting this replica's log from the long-term tier's state");
    p.truncate_fully_and_start_with(
        aux.next_offset,
        &aux.epochs,
        aux.producer_snapshot.as_deref(),
    )?;
    Ok(())
}

/// What a leader's answer asks of the fetch task.
#[derive(Default)]
struct Outcome {
    /// Back off before the next round.
    backoff: bool,
    /// Partitions the leader answered OFFSET_MOVED_TO_TIERED_STORAGE, with the leader epoch
    /// of the request: they start from the tier before they fetch again.
    moved_to_tier: Vec<(Arc<Partition>, i32)>,
}

/// Applies a leader's answer.
fn handle_response(
    observer: &dyn ReplicationObserver,
    leader: BrokerId,
    partitions: &[Arc<Partition>],
    wanted: &Wanted,
    response: FetchResponse,
) -> Outcome {
    if response.error_code != 0 {
        tracing::debug!(leader, code = response.error_code, "replica fetch refused");
        return Outcome {
            backoff: true,
            ..Outcome::default()
        };
    }
    let mut moved_to_tier = Vec::new();
    // `wanted` lists `partitions` in order, with the leader epoch each was fetched at.
    let mut by_tp: HashMap<(&str, i32), (&Arc<Partition>, i32)> = partitions
        .iter()
        .zip(wanted)
        .map(|(p, (_, w))| {
            (
                (p.tp.topic.as_str(), p.tp.partition),
                (p, w.current_leader_epoch),
            )
        })
        .collect();
    let mut backoff = false;
    for topic in &response.responses {
        for data in &topic.partitions {
            let Some((p, sent_epoch)) = by_tp.remove(&(topic.topic.as_str(), data.partition_index))
            else {
                continue;
            };
            if !still_follows(p, leader, sent_epoch) {
                continue;
            }
            let leo = p.log.log_end_offset();
            if data.error_code == ResponseError::OffsetOutOfRange.code()
                && data.log_start_offset > leo
            {
                tracing::info!(partition = %p.tp, leader, log_end_offset = leo, leader_log_start_offset = data.log_start_offset,
                    "the leader's log starts past this replica's end; restarting the log there");
                if let Err(e) = p.truncate_fully_and_start_at(data.log_start_offset) {
                    tracing::error!(partition = %p.tp, error = %e, "follower truncation failed");
                    backoff = true;
                }
                continue;
            }
            if data.error_code == ResponseError::OffsetMovedToTieredStorage.code() {
                moved_to_tier.push((p.clone(), sent_epoch));
                continue;
            }
            if data.error_code != 0 {
                let error = ResponseError::try_from_code(data.error_code);
                tracing::debug!(partition = %p.tp, leader, error = ?error, "replica fetch partition error");
                backoff = true;
                continue;
            }
            if data.diverging_epoch.epoch >= 0 {
                let target = p
                    .truncation_target(data.diverging_epoch.epoch, data.diverging_epoch.end_offset);
                tracing::info!(partition = %p.tp, leader, offset = target, "truncating to the leader's epoch boundary");
                if let Err(e) = p.truncate_to(target) {
                    tracing::error!(partition = %p.tp, error = %e, "follower truncation failed");
                    backoff = true;
                }
                continue;
            }
            // No error and no divergence: the log up to its end matches the leader's at the
            // epoch the request carried (KIP-320), so the WAL path may build on it.
            p.set_validated_epoch(sent_epoch);
            if let Some(records) = &data.records {
                if !records.is_empty() {
                    match p.append_fetched(sent_epoch, records) {
                        Ok(n) => observer.on_classic_follower_append(p, n),
                        Err(e) if e.is_disk_full() => {
                            // Said once by the log dir; the follower retries after a backoff.
                            tracing::debug!(partition = %p.tp, error = %e, "follower append refused: log dir full");
                            backoff = true;
                            continue;
                        }
                        Err(e) => {
                            tracing::error!(partition = %p.tp, error = %e, "follower append failed");
                            backoff = true;
                            continue;
                        }
                    }
                }
            }
            if let Err(e) = p.update_follower_log_start_offset(data.log_start_offset) {
                tracing::error!(partition = %p.tp, error = %e, "follower log start offset update failed");
            }
            p.update_follower_high_watermark(data.high_watermark);
        }
    }
    // An incremental response leaves out partitions with no news: the leader checked them at
    // the state the session holds (what was last sent, the epoch included) and found no error
    // and no divergence (a diverging epoch is news), so their logs are confirmed as well.
    for (p, sent_epoch) in by_tp.into_values() {
        if still_follows(p, leader, sent_epoch) {
            p.set_validated_epoch(sent_epoch);
        }
    }
    Outcome {
        backoff,
        moved_to_tier,
    }
}

/// Whether `p` still follows `leader` at the epoch a request was sent with: a response that
/// arrives after the image moved on (this broker leads now, or follows another epoch) speaks of
/// a log that is no longer the one to follow, and applying it (a truncation, a high watermark)
/// could damage a leader's log.
fn still_follows(p: &Partition, leader: BrokerId, sent_epoch: i32) -> bool {
    p.role() == Role::Follower { leader } && p.leader_epoch() == sent_epoch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote_wal::test_support::{batch_at as records, replicas, topic};

    /// Broker 2, following partition t-0 of leader 1 on the WAL lane.
    fn follower(dir: &std::path::Path) -> Arc<Partition> {
        let p = replicas(dir, 2, &topic(1, 0)).partition_of("t", 0).unwrap();
        p.set_wal_mode(true);
        p
    }

    /// Between reports the WAL lane long-polls for the high watermark exactly while the
    /// leader's is below what this follower reported, and reports at once when its log moved.
    #[test]
    fn the_wal_lane_long_polls_for_the_high_watermark_only_while_others_are_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = follower(dir.path());
        let parts = vec![p.clone()];
        p.append_as_follower(&records(0, 5)).unwrap();
        let reported = vec![p.log.log_end_offset()];
        assert!(!moved_since(&parts, &reported));

        // Never heard from the leader: nothing to wait for yet.
        assert!(!awaits_high_watermark(&parts, &reported));
        // The leader answered with a high watermark below our 5: another follower is behind.
        p.update_follower_high_watermark(3);
        assert!(awaits_high_watermark(&parts, &reported));
        // The high watermark reached what we reported: back to waiting for our own progress.
        p.update_follower_high_watermark(5);
        assert!(!awaits_high_watermark(&parts, &reported));

        // The WAL path appended: the next request is a report, whatever the high watermark.
        p.update_follower_high_watermark(3);
        p.append_as_follower(&records(5, 2)).unwrap();
        assert!(moved_since(&parts, &reported));
    }

    /// With several partitions, one whose high watermark reached what this follower reported
    /// may be waiting for this follower's next report: no long-poll may hold that back.
    #[test]
    fn no_long_poll_while_one_partition_waits_for_this_follower() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = (follower(d1.path()), follower(d2.path()));
        a.append_as_follower(&records(0, 5)).unwrap();
        b.append_as_follower(&records(0, 5)).unwrap();
        let parts = vec![a.clone(), b.clone()];
        let reported = vec![5, 5];
        a.update_follower_high_watermark(3);
        b.update_follower_high_watermark(5);
        assert!(
            !awaits_high_watermark(&parts, &reported),
            "b's high watermark waits for our next report of b"
        );
        b.update_follower_high_watermark(4);
        assert!(awaits_high_watermark(&parts, &reported));
    }

    /// Counts what the fetcher reports as appended.
    #[derive(Default)]
    struct Appended(std::sync::atomic::AtomicU64);

    impl ReplicationObserver for Appended {
        fn on_leader_append(&self, _: &Partition, _: &ferry_log::AppendInfo) {}
        fn on_replica_report(&self, _: &Partition, _: BrokerId, _: i64) -> bool {
            false
        }
        fn on_classic_follower_append(&self, _: &Partition, bytes: u64) {
            self.0.fetch_add(bytes, std::sync::atomic::Ordering::SeqCst);
        }
        fn on_wal_progress_reported(&self, _: Duration) {}
    }

    /// A response holding a batch whose CRC does not match (corrupted on the leader's disk or
    /// on the way) is refused whole: nothing is appended or counted, and the fetcher backs off
    /// before it fetches the same offsets again.
    #[test]
    fn a_corrupt_batch_from_the_leader_is_refused_and_fetched_again_after_a_back_off() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::TopicName;
        use kafka_protocol::protocol::StrBytes;

        let dir = tempfile::tempdir().unwrap();
        let p = follower(dir.path());
        p.set_wal_mode(false);
        let mut bytes = records(0, 5).to_vec();
        let last = bytes.len() - 2;
        bytes[last] ^= 0x10;
        let response =
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(5)
                    .with_records(Some(bytes.into()))])]);
        let wanted: Wanted = vec![(
            "t".to_string(),
            FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(p.leader_epoch()),
        )];
        let observer = Appended::default();
        let backoff =
            handle_response(&observer, 1, std::slice::from_ref(&p), &wanted, response).backoff;
        assert!(
            backoff,
            "a refused append backs off (RETRY_BACKOFF), no hot loop"
        );
        assert_eq!(p.log.log_end_offset(), 0);
        assert_eq!(observer.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// OFFSET_MOVED_TO_TIERED_STORAGE is no error to back off from and no truncation here:
    /// the partition is handed back, with the epoch it was fetched at, to start from the tier
    /// (`start_from_tier`), and its log is untouched until then. OFFSET_OUT_OF_RANGE with a
    /// leader log start past this log's end still restarts the log there.
    #[test]
    fn a_partition_moved_to_the_tier_is_handed_back_untouched() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::TopicName;
        use kafka_protocol::protocol::StrBytes;

        let dir = tempfile::tempdir().unwrap();
        let p = follower(dir.path());
        p.set_wal_mode(false);
        p.append_as_follower(&records(0, 3)).unwrap();
        let answer = |code: i16, log_start: i64| {
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![PartitionData::default()
                    .with_partition_index(0)
                    .with_error_code(code)
                    .with_log_start_offset(log_start)
                    .with_high_watermark(500)])])
        };
        let wanted: Wanted = vec![(
            "t".to_string(),
            FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(p.leader_epoch()),
        )];
        let observer = Appended::default();
        let parts = std::slice::from_ref(&p);
        let moved = ResponseError::OffsetMovedToTieredStorage.code();
        let outcome = handle_response(&observer, 1, parts, &wanted, answer(moved, 400));
        assert!(!outcome.backoff);
        assert_eq!(outcome.moved_to_tier.len(), 1);
        assert_eq!(outcome.moved_to_tier[0].1, p.leader_epoch());
        assert_eq!((p.log.log_start_offset(), p.log.log_end_offset()), (0, 3));

        let out_of_range = ResponseError::OffsetOutOfRange.code();
        let outcome = handle_response(&observer, 1, parts, &wanted, answer(out_of_range, 400));
        assert!(outcome.moved_to_tier.is_empty());
        assert_eq!(
            (p.log.log_start_offset(), p.log.log_end_offset()),
            (400, 400)
        );
    }

    /// Reports are paced only while what moved is outside the ISR (a catch-up): a partition in
    /// the ISR, or one leaving the lane, is reported at once.
    #[test]
    fn only_a_catch_up_outside_the_isr_paces_the_reports() {
        let dir = tempfile::tempdir().unwrap();
        let image = |isr: &[i32]| {
            ferry_test_support::Topic::default()
                .leader(1, 0)
                .isr(isr)
                .image()
        };
        let out = replicas(&dir.path().join("out"), 2, &image(&[1, 3]))
            .partition_of("t", 0)
            .unwrap();
        out.set_wal_mode(true);
        let inside = follower(&dir.path().join("in"));
        let parts = vec![out.clone(), inside.clone()];
        let reported = vec![0, 0];
        assert!(
            only_catching_up_moved(&parts, &reported, 2),
            "nothing moved"
        );
        out.append_as_follower(&records(0, 3)).unwrap();
        assert!(only_catching_up_moved(&parts, &reported, 2));
        inside.append_as_follower(&records(0, 3)).unwrap();
        assert!(
            !only_catching_up_moved(&parts, &reported, 2),
            "an ISR member moved"
        );
        let reported = vec![0, 3];
        out.set_wal_mode(false);
        assert!(
            !only_catching_up_moved(&parts, &reported, 2),
            "left the lane"
        );
    }

    /// A WAL append is reported without waiting for any timer.
    #[tokio::test(start_paused = true)]
    async fn a_wal_append_ends_the_wait_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = follower(dir.path());
        let parts = vec![p.clone()];
        let reported = vec![p.log.log_end_offset()];
        let start = tokio::time::Instant::now();
        let waiter = {
            let parts = parts.clone();
            let reported = reported.clone();
            tokio::spawn(async move {
                wait_for_progress(&parts, &reported, Duration::from_secs(60)).await
            })
        };
        tokio::task::yield_now().await;
        p.append_as_follower(&records(0, 1)).unwrap();
        assert!(waiter.await.unwrap(), "woken by the append");
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
