//! Broker liveness (KIP-631): heartbeats, session expiry and fencing, controlled shutdown, and
//! preferred-leader restoration. The controller's rules ([`Sessions`], [`records_for`],
//! [`rebalance_records`]) are pure functions in `ferry_cluster::liveness`; this module runs the
//! tasks around them.
//!
//! Every broker heartbeats to the active controller every `broker.heartbeat.interval.ms`
//! ([`heartbeats`]). Only the active controller (the Raft leader) keeps sessions, in memory
//! ([`Sessions`]); a node that becomes the leader gives every broker a full
//! `broker.session.timeout.ms` before fencing anyone. The controller side ([`spawn`]) has two
//! tasks: one answers heartbeats and watches deadlines without ever waiting on the quorum, the
//! other turns the resulting [`Action`]s into election records (`ferry_cluster::election`),
//! computed from the image current when they are proposed.
//!
//! - a session that expires fences the broker: its leaderships move to in-sync replicas and it
//!   leaves every ISR; a fenced broker that heartbeats again, caught up with the metadata, is
//!   unfenced (a heartbeat of an older incarnation gets STALE_BROKER_EPOCH and is ignored);
//! - controlled shutdown ([`controlled_shutdown`], on SIGTERM): the broker heartbeats with
//!   `want_shutdown`; the controller moves its leaderships to other in-sync replicas, and once
//!   it leads nothing another replica could lead, answers `should_shut_down` and fences it;
//! - every `leader.imbalance.check.interval.seconds`, preferred leaders are restored for
//!   brokers whose share of partitions led elsewhere exceeds
//!   `leader.imbalance.per.broker.percentage`;
//! - about once a second the controller also finishes what a rejected record left undone
//!   (a fenced broker still leading, a partition without leader that could have one).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ferry_cluster::image::NO_LEADER;
use ferry_cluster::{
    BrokerHeartbeat, BrokerId, ClusterError, HeartbeatError, HeartbeatInbox, Image, MetadataRecord,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use ferry_cluster::liveness::{
    leads_movable, led_partitions, rebalance_records, records_for, Action, Sessions,
};

use crate::broker::Broker;

/// How often the controller checks deadlines and leadership.
const TICK: Duration = Duration::from_millis(100);
/// How often the controller reconciles partitions left half-done by a rejected record.
const RECONCILE_EVERY: Duration = Duration::from_secs(1);
/// How often a broker in controlled shutdown asks the controller.
const SHUTDOWN_POLL: Duration = Duration::from_millis(200);
/// How long a broker in controlled shutdown tries to reach a controller at all: longer than a
/// Raft election; without a quorum nothing can move anyway.
const SHUTDOWN_NO_CONTROLLER: Duration = Duration::from_secs(3);
/// How long a broker told to shut down waits to see its own fence applied (so the others know
/// it is gone before it is: the last voters may be unable to commit it after it stops).
const SHUTDOWN_FENCE_WAIT: Duration = Duration::from_secs(2);

/// Liveness timing from the broker config.
#[derive(Debug, Clone)]
struct Settings {
    heartbeat_interval: Duration,
    session_timeout: Duration,
    unclean: bool,
    rebalance: bool,
    imbalance_interval: Duration,
    imbalance_percentage: i64,
}

impl Settings {
    fn of(broker: &Broker) -> Self {
        let c = &broker.config;
        Self {
            heartbeat_interval: c.broker_heartbeat_interval(),
            session_timeout: c.broker_session_timeout(),
            unclean: c.unclean_leader_election(),
            rebalance: c.auto_leader_rebalance_enable(),
            imbalance_interval: c.leader_imbalance_check_interval(),
            imbalance_percentage: c.leader_imbalance_per_broker_percentage(),
        }
    }

    /// How long a forwarded heartbeat may take: well within a session.
    fn heartbeat_ttl(&self) -> Duration {
        (self.session_timeout / 3).clamp(Duration::from_millis(200), Duration::from_secs(5))
    }
}

/// Starts this node's liveness tasks on `tasks`: its heartbeats, and the controller side
/// (sessions, fencing, rebalancing) that acts while this node is the active controller.
pub fn spawn(broker: &Arc<Broker>, tasks: &mut JoinSet<()>) {
    tasks.spawn(heartbeats(broker.clone()));
    if let Some(inbox) = broker.metadata.take_heartbeats() {
        let (tx, rx) = mpsc::unbounded_channel();
        tasks.spawn(controller(broker.clone(), inbox, tx));
        tasks.spawn(proposer(broker.clone(), rx));
    }
}

fn heartbeat_request(broker: &Broker, want_shutdown: bool) -> BrokerHeartbeat {
    BrokerHeartbeat {
        broker_id: broker.node_id,
        broker_epoch: broker.metadata.broker_epoch(),
        current_metadata_offset: broker.metadata.image().applied_index,
        want_fence: false,
        want_shutdown,
        offline_replicas: broker.replicas.offline_replicas(),
    }
}

/// Sends a heartbeat now, so the controller learns of replicas that just went offline without
/// waiting for the next beat (which repeats them anyway).
pub async fn report_offline_replicas(broker: &Broker) {
    if !broker.metadata.clustered() {
        return;
    }
    let settings = Settings::of(broker);
    let request = heartbeat_request(broker, false);
    if let Err(e) = broker
        .metadata
        .heartbeat(request, settings.heartbeat_ttl())
        .await
    {
        tracing::info!(error = %e, "reporting offline replicas failed; the next heartbeat repeats them");
    }
}

/// This broker's heartbeats, every `broker.heartbeat.interval.ms`.
async fn heartbeats(broker: Arc<Broker>) {
    let settings = Settings::of(&broker);
    let mut tick = tokio::time::interval(settings.heartbeat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fenced = false;
    let mut failing = false;
    loop {
        tick.tick().await;
        let request = heartbeat_request(&broker, false);
        match broker
            .metadata
            .heartbeat(request, settings.heartbeat_ttl())
            .await
        {
            Ok(reply) => {
                if reply.is_fenced != fenced {
                    tracing::info!(
                        fenced = reply.is_fenced,
                        "the controller reports this broker {}",
                        if reply.is_fenced {
                            "fenced"
                        } else {
                            "unfenced"
                        }
                    );
                    fenced = reply.is_fenced;
                }
                failing = false;
            }
            Err(e @ HeartbeatError::StaleBrokerEpoch { .. }) => {
                tracing::warn!(error = %e, "heartbeat refused");
            }
            Err(e) => {
                // Elections make this common for a moment; say it once per outage.
                if !failing {
                    tracing::info!(error = %e, "heartbeat failed; retrying");
                }
                failing = true;
            }
        }
    }
}

/// Answers heartbeats and watches sessions while this node is the active controller.
async fn controller(
    broker: Arc<Broker>,
    mut inbox: HeartbeatInbox,
    actions: mpsc::UnboundedSender<Action>,
) {
    let settings = Settings::of(&broker);
    let metrics = &broker.metrics.controller;
    let mut sessions = Sessions::new(settings.session_timeout);
    let mut active = false;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_reconcile = Instant::now();
    let mut next_rebalance = Instant::now() + settings.imbalance_interval;
    loop {
        tokio::select! {
            call = inbox.recv() => {
                let Some(call) = call else { return };
                let now = Instant::now();
                let image = broker.metadata.image();
                observe(&broker, &mut active, &mut sessions, &image, now, &mut next_rebalance, &settings);
                if !active {
                    let _ = call.reply.send(Err(HeartbeatError::NotController { leader: None }));
                    continue;
                }
                let outcome = sessions.heartbeat(&image, &call.request, now);
                if outcome.shutdown_completed {
                    metrics.controlled_shutdowns.inc();
                    tracing::info!(broker = call.request.broker_id, "controlled shutdown of broker complete");
                }
                if let Err(e) = &outcome.reply {
                    tracing::debug!(broker = call.request.broker_id, error = %e, "heartbeat refused");
                }
                let _ = call.reply.send(outcome.reply);
                if let Some(action) = outcome.action {
                    let _ = actions.send(action);
                }
            }
            _ = tick.tick() => {
                let now = Instant::now();
                let image = broker.metadata.image();
                let fenced = image.brokers.values().filter(|b| b.fenced).count();
                metrics.fenced_brokers.set(i64::try_from(fenced).unwrap_or(i64::MAX));
                observe(&broker, &mut active, &mut sessions, &image, now, &mut next_rebalance, &settings);
                metrics.active.set(i64::from(active));
                if !active {
                    continue;
                }
                for id in sessions.expired(&image, now) {
                    tracing::warn!(broker = id, timeout_ms = settings.session_timeout.as_millis() as u64, "broker session expired; fencing it");
                    let _ = actions.send(Action::Fence(id));
                }
                if now >= next_reconcile {
                    next_reconcile = now + RECONCILE_EVERY;
                    let _ = actions.send(Action::Reconcile(sessions.shutting_down()));
                }
                if settings.rebalance && now >= next_rebalance {
                    next_rebalance = now + settings.imbalance_interval;
                    let _ = actions.send(Action::Rebalance(sessions.shutting_down()));
                }
            }
        }
    }
}

/// Notices this node becoming (or ceasing to be) the active controller.
fn observe(
    broker: &Broker,
    active: &mut bool,
    sessions: &mut Sessions,
    image: &Image,
    now: Instant,
    next_rebalance: &mut Instant,
    settings: &Settings,
) {
    let leader = broker.metadata.is_active_controller();
    if leader && !*active {
        tracing::info!(
            brokers = image.brokers.len(),
            "this node is the active controller; every broker gets a full session"
        );
        sessions.reset(image, now);
        *next_rebalance = now + settings.imbalance_interval;
    } else if !leader && *active {
        tracing::info!("this node is no longer the active controller");
        sessions.clear();
    }
    *active = leader;
}

/// Proposes the records of queued actions, one action at a time, each from the image current
/// when it runs. Duplicate actions queued meanwhile run once.
async fn proposer(broker: Arc<Broker>, mut rx: mpsc::UnboundedReceiver<Action>) {
    let unclean = Settings::of(&broker).unclean;
    let percentage = Settings::of(&broker).imbalance_percentage;
    while let Some(first) = rx.recv().await {
        let mut batch = BTreeSet::from([first]);
        while let Ok(more) = rx.try_recv() {
            batch.insert(more);
        }
        for action in batch {
            if !broker.metadata.is_active_controller() {
                break;
            }
            match &action {
                Action::Reconcile(shutting_down) => {
                    let image = broker.metadata.image();
                    for reg in image.brokers.values() {
                        let step = if reg.fenced {
                            Action::Fence(reg.id)
                        } else if shutting_down.contains(&reg.id) {
                            continue;
                        } else {
                            Action::Unfence(reg.id)
                        };
                        let records = records_for(&broker.metadata.image(), &step, unclean);
                        propose(&broker, records, &step).await;
                    }
                }
                Action::Rebalance(exclude) => {
                    let records = rebalance_records(&broker.metadata.image(), percentage, exclude);
                    propose(&broker, records, &action).await;
                }
                _ => {
                    let records = records_for(&broker.metadata.image(), &action, unclean);
                    propose(&broker, records, &action).await;
                }
            }
        }
    }
}

/// Proposes `records`: a broker record (fence, unfence) first, then the partition changes all
/// at once (each touches another partition, and the quorum commits them in a few batches rather
/// than one round trip each). A failure stops the broker record's followers; a rejected
/// partition change is recomputed by a later round.
async fn propose(broker: &Arc<Broker>, records: Vec<MetadataRecord>, why: &Action) {
    let (partitions, brokers): (Vec<_>, Vec<_>) = records
        .into_iter()
        .partition(|r| matches!(r, MetadataRecord::AlterPartition { .. }));
    for record in brokers {
        if !propose_one(broker, record, why).await {
            return;
        }
    }
    let mut changes = JoinSet::new();
    for record in partitions {
        let (broker, why) = (broker.clone(), why.clone());
        changes.spawn(async move { propose_one(&broker, record, &why).await });
    }
    while changes.join_next().await.is_some() {}
}

/// Proposes one record and logs what it did; false if it failed.
async fn propose_one(broker: &Broker, record: MetadataRecord, why: &Action) -> bool {
    let election = leader_change(&broker.metadata.image(), &record);
    match broker.metadata.propose_async(record.clone()).await {
        Ok(()) => {
            if let Some((topic, partition, from, to, epoch, unclean)) = election {
                broker.metrics.controller.election(unclean);
                tracing::info!(%topic, partition, from, to, leader_epoch = epoch, unclean, cause = ?why, "partition leader changed");
            } else if let MetadataRecord::FenceBroker { id }
            | MetadataRecord::UnfenceBroker { id } = &record
            {
                let fenced = matches!(record, MetadataRecord::FenceBroker { .. });
                tracing::info!(broker = id, fenced, cause = ?why, "broker {}", if fenced { "fenced" } else { "unfenced" });
            }
            true
        }
        Err(ClusterError::Rejected(e)) => {
            tracing::debug!(error = %e, cause = ?why, "election record rejected (the image moved on)");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, cause = ?why, "cannot propose an election record");
            false
        }
    }
}

/// (topic, partition, old leader, new leader, leader epoch, unclean) when `record` gives a
/// partition a new, real leader.
fn leader_change(
    image: &Image,
    record: &MetadataRecord,
) -> Option<(String, i32, BrokerId, BrokerId, i32, bool)> {
    let MetadataRecord::AlterPartition {
        topic_id,
        partition,
        leader,
        leader_epoch,
        unclean,
        ..
    } = record
    else {
        return None;
    };
    let topic = image.topic_by_id(*topic_id)?;
    let current = topic.partitions.get(usize::try_from(*partition).ok()?)?;
    (current.leader != *leader && *leader != NO_LEADER).then(|| {
        (
            topic.name.clone(),
            *partition,
            current.leader,
            *leader,
            *leader_epoch,
            *unclean,
        )
    })
}

/// On SIGTERM: has the controller move this broker's leaderships to other in-sync replicas,
/// then returns, at the latest after `broker.session.timeout.ms` (the controller would fence
/// a broker that silent anyway). A single node, or `controlled.shutdown.enable = false`,
/// returns at once.
pub async fn controlled_shutdown(broker: Arc<Broker>) {
    if !broker.config.controlled_shutdown_enable() || !broker.metadata.clustered() {
        return;
    }
    let settings = Settings::of(&broker);
    let id = broker.node_id;
    let deadline = Instant::now() + settings.session_timeout;
    tracing::info!(
        leaderships = led_partitions(&broker.metadata.image(), id),
        "controlled shutdown: asking the controller to move this broker's leaderships"
    );
    let mut unreachable_since: Option<Instant> = None;
    loop {
        let request = heartbeat_request(&broker, true);
        let reply = broker
            .metadata
            .heartbeat(request, settings.heartbeat_ttl())
            .await;
        // The controller decided from its image; wait until ours shows the moves too.
        let movable_here = leads_movable(&broker.metadata.image(), id);
        match reply {
            Ok(r) if r.should_shut_down && !movable_here => {
                wait_fenced(&broker).await;
                break;
            }
            Ok(_) => unreachable_since = None,
            Err(e @ HeartbeatError::StaleBrokerEpoch { .. }) => {
                tracing::warn!(error = %e, "controlled shutdown refused; stopping");
                break;
            }
            // Nothing to hand over, and no controller to tell: its session will expire.
            Err(_) if !movable_here => break,
            Err(e) => {
                let since = *unreachable_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= SHUTDOWN_NO_CONTROLLER {
                    tracing::warn!(error = %e, leaderships = led_partitions(&broker.metadata.image(), id), "no active controller for controlled shutdown (no quorum?); stopping anyway");
                    return;
                }
            }
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                leaderships = led_partitions(&broker.metadata.image(), id),
                "controlled shutdown did not complete within broker.session.timeout.ms; stopping anyway"
            );
            return;
        }
        tokio::time::sleep(SHUTDOWN_POLL).await;
    }
    tracing::info!(
        leaderships = led_partitions(&broker.metadata.image(), id),
        "controlled shutdown complete"
    );
}

/// Waits (briefly) until this node's image shows this broker fenced, when another broker is
/// live to learn of it.
async fn wait_fenced(broker: &Broker) {
    let mut rx = broker.metadata.subscribe();
    let id = broker.node_id;
    let others_live = rx
        .borrow()
        .brokers
        .values()
        .any(|b| b.id != id && !b.fenced);
    if !others_live {
        return;
    }
    let fenced =
        tokio::time::timeout(SHUTDOWN_FENCE_WAIT, rx.wait_for(|image| !image.is_live(id))).await;
    if !matches!(fenced, Ok(Ok(_))) {
        tracing::debug!("own fence not seen before stopping");
    }
}
