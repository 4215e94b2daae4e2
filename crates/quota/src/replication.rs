//! Replication throttles (KIP-73), as Kafka's `ReplicationQuotaManager`: the bytes a broker
//! sends as leader, or fetches as follower, for *throttled replicas* are measured with Kafka's
//! sampled rate; while that rate is over the bound, throttled replicas that are not in sync get
//! no data (the leader leaves their records out, the follower leaves them out of its fetch).
//! In-sync replicas are never throttled, so a throttle cannot hold back acks=all.
//!
//! Which replicas are throttled comes from the topic configs `leader.replication.throttled.replicas`
//! and `follower.replication.throttled.replicas`: `*`, or `partition:broker` pairs, of which a
//! broker keeps the partitions listed with its own id ([`throttled_partitions`]). The bounds
//! are the broker configs `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate` (bytes per second; Kafka's default, `Long.MAX_VALUE`,
//! means none).

use std::collections::{BTreeSet, HashMap};

use crate::rate::{RateConfig, SampledRate};

/// The partitions of one topic a broker throttles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottledPartitions {
    /// `*`: every partition.
    All,
    /// The partitions listed.
    Listed(BTreeSet<i32>),
}

impl ThrottledPartitions {
    fn contains(&self, partition: i32) -> bool {
        match self {
            ThrottledPartitions::All => true,
            ThrottledPartitions::Listed(set) => set.contains(&partition),
        }
    }
}

/// The partitions `broker` throttles under one `*.replication.throttled.replicas` value, or
/// `None` when it throttles none. Entries that do not parse are skipped (the value was checked
/// when it was set).
pub fn throttled_partitions(value: &str, broker: i32) -> Option<ThrottledPartitions> {
    let value = value.trim();
    if value == "*" {
        return Some(ThrottledPartitions::All);
    }
    let listed: BTreeSet<i32> = value
        .split(',')
        .filter_map(|entry| {
            let (partition, b) = entry.trim().split_once(':')?;
            let b: i32 = b.trim().parse().ok()?;
            (b == broker)
                .then(|| partition.trim().parse().ok())
                .flatten()
        })
        .collect();
    (!listed.is_empty()).then_some(ThrottledPartitions::Listed(listed))
}

/// One side's throttle (leader or follower) on one broker.
#[derive(Debug, Default)]
pub struct ReplicationQuota {
    /// Bytes per second; `None`: unbounded.
    bound: Option<f64>,
    config: RateConfig,
    rate: SampledRate,
    /// Throttled partitions by topic name.
    throttled: HashMap<String, ThrottledPartitions>,
}

impl ReplicationQuota {
    /// No throttled replicas, no bound, measured over `config`'s windows (Kafka's
    /// `replication.quota.window.num` x `replication.quota.window.size.seconds`).
    pub fn new(config: RateConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Sets the bound in bytes per second; a negative value or `i64::MAX` (Kafka's default)
    /// means none.
    pub fn set_bound(&mut self, bytes_per_second: i64) {
        self.bound = (0..i64::MAX)
            .contains(&bytes_per_second)
            .then_some(bytes_per_second as f64);
    }

    /// Replaces the throttled partitions (by topic).
    pub fn set_throttled(&mut self, throttled: HashMap<String, ThrottledPartitions>) {
        self.throttled = throttled;
    }

    /// Whether replicas of `topic`-`partition` are throttled on this side (Kafka's
    /// `isThrottled`), whatever the rate.
    pub fn is_throttled(&self, topic: &str, partition: i32) -> bool {
        self.throttled
            .get(topic)
            .is_some_and(|t| t.contains(partition))
    }

    /// Whether the measured rate is over the bound at `now_ms` (Kafka's `isQuotaExceeded`).
    pub fn is_exceeded(&mut self, now_ms: i64) -> bool {
        match self.bound {
            None => false,
            Some(bound) => self.rate.measure(&self.config, now_ms) > bound,
        }
    }

    /// Whether a replica of `topic`-`partition` that is `in_sync` or not gets no data now.
    pub fn holds_back(&mut self, topic: &str, partition: i32, in_sync: bool, now_ms: i64) -> bool {
        !in_sync && self.is_throttled(topic, partition) && self.is_exceeded(now_ms)
    }

    /// Counts `bytes` of throttled replicas sent or fetched at `now_ms`.
    pub fn record(&mut self, bytes: u64, now_ms: i64) {
        if bytes > 0 {
            self.rate.record(&self.config, bytes as f64, now_ms);
        }
    }

    /// The measured rate in bytes per second, without disturbing the windows (metrics).
    pub fn rate(&self, now_ms: i64) -> f64 {
        self.rate.peek(&self.config, now_ms)
    }
}

#[cfg(test)]
#[path = "replication_test.rs"]
mod tests;
