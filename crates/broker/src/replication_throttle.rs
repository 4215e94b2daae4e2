//! The replication throttles this broker applies (KIP-73), as a reassignment sets them: which
//! replicas are throttled follows the topic configs `leader.replication.throttled.replicas` /
//! `follower.replication.throttled.replicas` in the metadata image; the bounds follow the
//! (dynamic) broker configs `leader.replication.throttled.rate` /
//! `follower.replication.throttled.rate`. The arithmetic is ferry-quota's
//! [`ReplicationQuota`].
//!
//! Where it acts: the Fetch handler leaves out the records of a leader-throttled partition for a
//! follower outside the ISR while the leader side is over its rate, and counts what it sends for
//! such partitions; the replica fetcher leaves a follower-throttled partition out of its fetch
//! while this broker is outside the partition's ISR and the follower side is over its rate, and
//! counts what it receives for them. Replicas in the ISR are never held back. Without any
//! throttled replica no lock is taken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tokio::time::Instant;

use ferry_cluster::{BrokerId, Image};
use ferry_config::BrokerConfig;
use ferry_metrics::{Metrics, ReplicationSideLabels};
use ferry_quota::{throttled_partitions, RateConfig, ReplicationQuota};

const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";

/// Which side of replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Records this broker sends as leader.
    Leader,
    /// Records this broker fetches as follower.
    Follower,
}

impl Side {
    fn label(self) -> ReplicationSideLabels {
        ReplicationSideLabels {
            side: match self {
                Side::Leader => "leader",
                Side::Follower => "follower",
            },
        }
    }
}

struct SideQuota {
    quota: Mutex<ReplicationQuota>,
    /// Some replica is throttled on this side: else nothing is looked up.
    active: AtomicBool,
}

impl SideQuota {
    fn new(config: RateConfig) -> Self {
        Self {
            quota: Mutex::new(ReplicationQuota::new(config)),
            active: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplicationQuota> {
        self.quota.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// This broker's two replication throttles.
pub struct ReplicationThrottles {
    node_id: BrokerId,
    leader: SideQuota,
    follower: SideQuota,
    started: Instant,
}

impl ReplicationThrottles {
    pub fn new(config: &BrokerConfig, node_id: BrokerId) -> Self {
        let (samples, seconds) = config.replication_quota_windows();
        let rate = RateConfig::from_broker_config(samples, seconds).unwrap_or_default();
        let throttles = Self {
            node_id,
            leader: SideQuota::new(rate),
            follower: SideQuota::new(rate),
            started: Instant::now(),
        };
        throttles.follow_rates(config);
        throttles
    }

    fn side(&self, side: Side) -> &SideQuota {
        match side {
            Side::Leader => &self.leader,
            Side::Follower => &self.follower,
        }
    }

    fn now_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Takes the bounds from the broker config as it stands (dynamic values included).
    pub fn follow_rates(&self, config: &BrokerConfig) {
        let (leader, follower) = config.replication_throttled_rates();
        self.leader.lock().set_bound(leader);
        self.follower.lock().set_bound(follower);
    }

    /// Takes the throttled replicas from the topics' configs in `image`.
    pub fn follow_image(&self, image: &Image) {
        for (side, key) in [
            (&self.leader, LEADER_REPLICAS),
            (&self.follower, FOLLOWER_REPLICAS),
        ] {
            let throttled: HashMap<_, _> = image
                .topics
                .values()
                .filter_map(|t| {
                    let parts = throttled_partitions(t.configs.get(key)?, self.node_id)?;
                    Some((t.name.clone(), parts))
                })
                .collect();
            side.active.store(!throttled.is_empty(), Ordering::Release);
            side.lock().set_throttled(throttled);
        }
    }

    /// Whether `side` gives a replica of `topic`-`partition` no records now; `in_sync` (whether
    /// the replica is in the ISR, which costs a lock and a copy) is asked only when some replica
    /// is throttled on this side.
    pub fn holds_back(
        &self,
        side: Side,
        metrics: &Metrics,
        topic: &str,
        partition: i32,
        in_sync: impl FnOnce() -> bool,
    ) -> bool {
        let quota = self.side(side);
        if !quota.active.load(Ordering::Acquire) {
            return false;
        }
        let in_sync = in_sync();
        if in_sync {
            return false;
        }
        let held = quota
            .lock()
            .holds_back(topic, partition, in_sync, self.now_ms());
        if held {
            metrics
                .replication_throttle_held_back
                .get_or_create(&side.label())
                .inc();
        }
        held
    }

    /// Whether `topic`-`partition` is throttled on `side` (whatever the rate): its bytes count.
    pub fn is_throttled(&self, side: Side, topic: &str, partition: i32) -> bool {
        let quota = self.side(side);
        quota.active.load(Ordering::Acquire) && quota.lock().is_throttled(topic, partition)
    }

    /// Counts `bytes` of throttled replicas on `side`.
    pub fn record(&self, side: Side, metrics: &Metrics, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.side(side).lock().record(bytes, self.now_ms());
        metrics
            .replication_throttled_bytes
            .get_or_create(&side.label())
            .inc_by(bytes);
    }
}
