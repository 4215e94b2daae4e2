//! The active controller's rules for broker liveness (KIP-631), as functions of (image,
//! event, now): broker sessions and their expiry ([`Sessions`]), what fencing, unfencing and
//! controlled shutdown propose ([`records_for`]), and preferred-leader restoration for brokers
//! over the imbalance ratio ([`rebalance_records`]). The broker's `liveness` module runs the
//! heartbeat and controller tasks around them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::image::NO_LEADER;
use crate::{
    election, BrokerHeartbeat, BrokerId, HeartbeatError, HeartbeatReply, Image, MetadataRecord,
    OfflineReplica,
};

/// How soon a fence that did not take effect (no quorum) is tried again.
const FENCE_RETRY: Duration = Duration::from_secs(1);

/// What the controller has to propose.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Fence(BrokerId),
    ControlledShutdown(BrokerId),
    Unfence(BrokerId),
    /// The broker's replicas that went offline with a failed log dir leave their ISRs, and
    /// their leadership moves.
    OfflineReplicas(BrokerId, BTreeSet<OfflineReplica>),
    /// Restore preferred leaders, never onto these brokers (they are shutting down).
    Rebalance(BTreeSet<BrokerId>),
    /// Finish fences and elections that a rejected record left undone.
    Reconcile(BTreeSet<BrokerId>),
}

/// One broker's session, as the active controller keeps it.
#[derive(Debug, Clone)]
struct Session {
    epoch: i64,
    deadline: Instant,
    shutting_down: bool,
    shutdown_reported: bool,
    /// The metadata offset a fenced broker must reach before it is unfenced.
    catch_up_to: Option<u64>,
}

impl Session {
    fn new(epoch: i64, deadline: Instant) -> Self {
        Self {
            epoch,
            deadline,
            shutting_down: false,
            shutdown_reported: false,
            catch_up_to: None,
        }
    }
}

/// The controller's answer to one heartbeat.
#[derive(Debug)]
pub struct Outcome {
    pub reply: Result<HeartbeatReply, HeartbeatError>,
    pub action: Option<Action>,
    /// This heartbeat completed the broker's controlled shutdown.
    pub shutdown_completed: bool,
}

/// Broker sessions of the active controller (Kafka's BrokerHeartbeatManager).
#[derive(Debug)]
pub struct Sessions {
    timeout: Duration,
    map: BTreeMap<BrokerId, Session>,
}

impl Sessions {
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            map: BTreeMap::new(),
        }
    }

    /// A new active controller: every registered broker gets a full session from `now`.
    pub fn reset(&mut self, image: &Image, now: Instant) {
        self.map = image
            .brokers
            .values()
            .map(|b| (b.id, Session::new(b.epoch, now + self.timeout)))
            .collect();
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Brokers in controlled shutdown.
    pub fn shutting_down(&self) -> BTreeSet<BrokerId> {
        self.map
            .iter()
            .filter(|(_, s)| s.shutting_down)
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn heartbeat(&mut self, image: &Image, req: &BrokerHeartbeat, now: Instant) -> Outcome {
        let id = req.broker_id;
        let Some(reg) = image.brokers.get(&id) else {
            return Outcome {
                reply: Err(HeartbeatError::NotRegistered(id)),
                action: None,
                shutdown_completed: false,
            };
        };
        if reg.epoch != req.broker_epoch {
            return Outcome {
                reply: Err(HeartbeatError::StaleBrokerEpoch {
                    current: reg.epoch,
                    got: req.broker_epoch,
                }),
                action: None,
                shutdown_completed: false,
            };
        }
        let session = self
            .map
            .entry(id)
            .or_insert_with(|| Session::new(reg.epoch, now));
        if session.epoch != reg.epoch {
            *session = Session::new(reg.epoch, now);
        }
        session.deadline = now + self.timeout;
        session.shutting_down |= req.want_shutdown;
        if session.shutting_down {
            let done = !leads_movable(image, id);
            let shutdown_completed = done && !session.shutdown_reported;
            session.shutdown_reported |= done;
            let action = match (done, reg.fenced) {
                (false, _) => Some(Action::ControlledShutdown(id)),
                // It is going away: out of every ISR now, not when its session expires.
                (true, false) => Some(Action::Fence(id)),
                (true, true) => None,
            };
            return Outcome {
                reply: Ok(HeartbeatReply {
                    is_caught_up: true,
                    is_fenced: reg.fenced,
                    should_shut_down: done,
                }),
                action,
                shutdown_completed,
            };
        }
        if !reg.fenced {
            session.catch_up_to = None;
            return Outcome {
                reply: Ok(HeartbeatReply {
                    is_caught_up: true,
                    is_fenced: false,
                    should_shut_down: false,
                }),
                // Sent with every heartbeat while the replicas are offline: once their records
                // are in, the action proposes nothing.
                action: if req.want_fence {
                    Some(Action::Fence(id))
                } else if req.offline_replicas.is_empty() {
                    None
                } else {
                    let offline = req.offline_replicas.iter().copied().collect();
                    Some(Action::OfflineReplicas(id, offline))
                },
                shutdown_completed: false,
            };
        }
        // Fenced: unfence once the broker has applied the metadata as of now (Kafka waits for
        // the registration offset; a fenced broker may have missed the moves since).
        let target = *session.catch_up_to.get_or_insert(image.applied_index);
        let caught_up = req.current_metadata_offset >= target;
        Outcome {
            reply: Ok(HeartbeatReply {
                is_caught_up: caught_up,
                is_fenced: true,
                should_shut_down: false,
            }),
            action: (caught_up && !req.want_fence).then_some(Action::Unfence(id)),
            shutdown_completed: false,
        }
    }

    /// Live brokers whose session has expired at `now`; each is reported again after
    /// [`FENCE_RETRY`] while the image still shows it live. A broker seen for the first time
    /// (or with a new registration) gets a full session.
    pub fn expired(&mut self, image: &Image, now: Instant) -> Vec<BrokerId> {
        let mut out = Vec::new();
        for reg in image.brokers.values().filter(|b| !b.fenced) {
            let session = self
                .map
                .entry(reg.id)
                .or_insert_with(|| Session::new(reg.epoch, now + self.timeout));
            if session.epoch != reg.epoch {
                *session = Session::new(reg.epoch, now + self.timeout);
            }
            if now >= session.deadline {
                session.deadline = now + FENCE_RETRY;
                out.push(reg.id);
            }
        }
        out
    }
}

/// Whether `broker` leads a partition that another live in-sync replica could lead.
pub fn leads_movable(image: &Image, broker: BrokerId) -> bool {
    let live = |b: BrokerId| b != broker && image.is_live(b);
    image
        .topics
        .values()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.leader == broker)
        .any(|p| {
            let others: Vec<BrokerId> = p.isr.iter().copied().filter(|b| *b != broker).collect();
            election::elect_leader(p, &others, live, false).leader != NO_LEADER
        })
}

/// Partitions `broker` leads in `image`.
pub fn led_partitions(image: &Image, broker: BrokerId) -> usize {
    image
        .topics
        .values()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.leader == broker)
        .count()
}

/// The preferred-leader records for brokers over the imbalance ratio: of the partitions a
/// broker is the preferred leader of, more than `percentage` % are led by another broker.
/// Never elects a broker in `exclude`.
pub fn rebalance_records(
    image: &Image,
    percentage: i64,
    exclude: &BTreeSet<BrokerId>,
) -> Vec<MetadataRecord> {
    let mut preferred: BTreeMap<BrokerId, (i64, i64)> = BTreeMap::new();
    for p in image.topics.values().flat_map(|t| t.partitions.iter()) {
        let entry = preferred.entry(p.preferred_leader()).or_default();
        entry.0 += 1;
        if p.leader != p.preferred_leader() {
            entry.1 += 1;
        }
    }
    let imbalanced = |b: BrokerId| {
        preferred
            .get(&b)
            .is_some_and(|(total, elsewhere)| elsewhere * 100 > percentage * total)
    };
    election::restore_preferred_leaders(image)
        .into_iter()
        .filter(|r| match r {
            MetadataRecord::AlterPartition { leader, .. } => {
                !exclude.contains(leader) && imbalanced(*leader)
            }
            _ => false,
        })
        .collect()
}

/// The records `action` needs against `image` (empty when there is nothing left to do).
pub fn records_for(image: &Image, action: &Action, unclean: bool) -> Vec<MetadataRecord> {
    match action {
        Action::Fence(id) => {
            let mut records = election::fence_broker(image, *id, unclean);
            if !image.is_live(*id) {
                records.retain(|r| !matches!(r, MetadataRecord::FenceBroker { .. }));
            }
            records
        }
        Action::Unfence(id) => {
            let mut records = election::unfence_broker(image, *id, unclean);
            if image.is_live(*id) {
                records.retain(|r| !matches!(r, MetadataRecord::UnfenceBroker { .. }));
            }
            records
        }
        Action::ControlledShutdown(id) => election::controlled_shutdown(image, *id),
        Action::OfflineReplicas(id, offline) => election::offline_replicas(image, *id, offline),
        // Expanded broker by broker in `propose_action`, each from a fresh image.
        Action::Reconcile(_) | Action::Rebalance(_) => Vec::new(),
    }
}

#[cfg(test)]
#[path = "liveness_test.rs"]
mod tests;
