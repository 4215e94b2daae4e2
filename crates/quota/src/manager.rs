//! [`QuotaManager`]: Kafka's `ClientQuotaManager` and `ClientRequestQuotaManager` without the
//! threads, with `ControllerMutationQuotaManager`'s token bucket: one sensor (a [`SampledRate`],
//! or a [`TokenBucket`] for `controller_mutation_rate`) per usage bucket, recording and throttle
//! decisions as functions of (state, value, now).
//!
//! What it owns: the [`QuotaConfig`] in force and the sensors. What it leaves to the broker:
//! reading the clock, measuring request sizes and thread time, muting connections
//! ([`crate::ChannelThrottle`]), and locking (the manager is a plain `&mut self` value; put it
//! behind a mutex, or shard it by quota key).
//!
//! Invariants:
//! - a sensor exists only for a (key, [`MetricKey`]) that some connection resolved to; each
//!   record re-resolves, so a quota changed or removed in the metadata image applies to the next
//!   request (a connection whose bucket changes starts a fresh sensor, as in Kafka where the
//!   sensor name follows the bucket);
//! - a connection with no quota for a key is neither recorded nor throttled (Kafka records such
//!   clients under an unlimited sensor for metrics once any quota exists; ferry does not);
//! - a sensor not recorded into for `inactive_sensor_expiration_ms` (an hour, as in Kafka) is
//!   dropped, checked at most every [`EXPIRY_CHECK_INTERVAL_MS`] while recording and whenever
//!   [`QuotaManager::expire_idle_sensors`] is called, so memory does not grow with client ids.
//!
//! The record path runs for every request: it resolves the quota on borrowed names and finds
//! the sensor by borrowed tags, allocating only when a usage bucket is first seen.

use std::collections::HashMap;

use crate::config::QuotaConfig;
use crate::entity::{MetricKey, QuotaKey};
use crate::rate::{RateConfig, SampledRate};
use crate::throttle::{bounded_throttle_time_ms, nanos_to_percentage, throttle_time_ms};
use crate::token_bucket::{token_bucket_throttle_ms, TokenBucket};

/// Kafka's `InactiveSensorExpirationTimeSeconds`: one hour, in milliseconds.
pub const INACTIVE_SENSOR_EXPIRATION_MS: i64 = 3_600_000;

/// How often recording also sweeps idle sensors (Kafka's metrics expiry task runs every 30 s).
pub const EXPIRY_CHECK_INTERVAL_MS: i64 = 30_000;

/// Settings of a [`QuotaManager`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaManagerConfig {
    /// `quota.window.num` and `quota.window.size.seconds`.
    pub rate: RateConfig,
    /// How long a sensor may go without a record before it is dropped.
    pub inactive_sensor_expiration_ms: i64,
}

impl Default for QuotaManagerConfig {
    /// Kafka's defaults: 11 windows of 1 s, sensors dropped after an hour idle.
    fn default() -> Self {
        Self {
            rate: RateConfig::default(),
            inactive_sensor_expiration_ms: INACTIVE_SENSOR_EXPIRATION_MS,
        }
    }
}

/// How a sensor measures usage: a sampled rate for byte rates and request time, a token bucket
/// for controller mutations (as in Kafka).
#[derive(Debug, Clone)]
enum Meter {
    Rate(SampledRate),
    Bucket(TokenBucket),
}

impl Meter {
    fn for_key(key: QuotaKey) -> Self {
        if key == QuotaKey::ControllerMutationRate {
            Meter::Bucket(TokenBucket::new())
        } else {
            Meter::Rate(SampledRate::new())
        }
    }
}

/// The usage of one bucket for one quota key.
#[derive(Debug, Clone)]
struct Sensor {
    meter: Meter,
    /// The bound applied at the last record (for metrics).
    bound: f64,
    last_record_ms: i64,
    throttle_count: u64,
    throttle_time_ms_total: u64,
}

/// What [`QuotaManager::record_controller_mutations`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationDecision {
    /// Carry out the mutation; answer with this throttle time (0 when within quota).
    Accepted {
        /// How long to throttle the client.
        throttle_ms: u64,
    },
    /// Refuse it with THROTTLING_QUOTA_EXCEEDED and this throttle time (strict mode only).
    Rejected {
        /// How long to throttle the client.
        throttle_ms: u64,
    },
}

impl MutationDecision {
    /// The throttle time, accepted or not.
    pub fn throttle_ms(&self) -> u64 {
        match *self {
            MutationDecision::Accepted { throttle_ms }
            | MutationDecision::Rejected { throttle_ms } => throttle_ms,
        }
    }

    /// Whether the mutation may go ahead.
    pub fn is_accepted(&self) -> bool {
        matches!(self, MutationDecision::Accepted { .. })
    }
}

/// A read-only view of one sensor, for metrics (Kafka's `byte-rate`/`request-time` and
/// `throttle-time` metrics, tagged `user` and `client-id`).
#[derive(Debug, Clone, PartialEq)]
pub struct SensorStats {
    /// Which quota the sensor measures.
    pub key: QuotaKey,
    /// Whose usage it counts (the metric tags).
    pub metric_key: MetricKey,
    /// The measured rate at the time asked (bytes/s, or percent for `request_percentage`); for
    /// `controller_mutation_rate`, the tokens left in the bucket (Kafka's `tokens` metric).
    pub rate: f64,
    /// The quota applied at the last record.
    pub bound: f64,
    /// How many records found the rate above the bound.
    pub throttle_count: u64,
    /// The sum of the throttle times returned for those records.
    pub throttle_time_ms_total: u64,
    /// When the sensor was last recorded into.
    pub last_record_ms: i64,
}

/// The sensors of one quota key, by `user` tag then `client-id` tag, so that the per-request
/// lookup borrows the names and allocates only when a bucket is first seen.
#[derive(Debug, Clone, Default)]
struct SensorTable {
    by_user: HashMap<String, HashMap<String, Sensor>>,
    len: usize,
}

impl SensorTable {
    fn get(&self, user: &str, client_id: &str) -> Option<&Sensor> {
        self.by_user.get(user)?.get(client_id)
    }

    /// The sensor of (`user`, `client_id`), made by `make` if absent.
    fn get_or_insert(
        &mut self,
        user: &str,
        client_id: &str,
        make: impl FnOnce() -> Sensor,
    ) -> Option<&mut Sensor> {
        if !self.by_user.contains_key(user) {
            self.by_user.insert(user.to_owned(), HashMap::new());
        }
        let clients = self.by_user.get_mut(user)?;
        if !clients.contains_key(client_id) {
            clients.insert(client_id.to_owned(), make());
            self.len += 1;
        }
        clients.get_mut(client_id)
    }

    /// Keeps the sensors for which `keep` holds, dropping emptied users; returns how many went.
    fn retain(&mut self, mut keep: impl FnMut(&Sensor) -> bool) -> usize {
        let before = self.len;
        let mut len = 0;
        self.by_user.retain(|_, clients| {
            clients.retain(|_, s| keep(s));
            len += clients.len();
            !clients.is_empty()
        });
        self.len = len;
        before - len
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &str, &Sensor)> {
        self.by_user.iter().flat_map(|(u, clients)| {
            clients
                .iter()
                .map(move |(c, s)| (u.as_str(), c.as_str(), s))
        })
    }
}

/// Client-quota enforcement for one broker: the quotas in force and the usage of each bucket.
#[derive(Debug, Clone, Default)]
pub struct QuotaManager {
    config: QuotaConfig,
    settings: QuotaManagerConfig,
    /// Indexed by [`QuotaKey::index`].
    sensors: [SensorTable; QuotaKey::ALL.len()],
    /// Request time of exempt principals (inter-broker, ClusterAction), never throttled.
    exempt: SampledRate,
    next_expiry_check_ms: Option<i64>,
}

impl QuotaManager {
    /// A manager with no quotas and the given settings.
    pub fn new(settings: QuotaManagerConfig) -> Self {
        Self {
            settings,
            ..Self::default()
        }
    }

    /// The settings this manager was built with.
    pub fn settings(&self) -> &QuotaManagerConfig {
        &self.settings
    }

    /// The quotas in force.
    pub fn config(&self) -> &QuotaConfig {
        &self.config
    }

    /// The quotas in force, for the broker to update from the metadata image. Changes apply to
    /// the next record.
    pub fn config_mut(&mut self) -> &mut QuotaConfig {
        &mut self.config
    }

    /// Records `value` (bytes for the byte-rate keys, percent-seconds for `request_percentage`,
    /// see [`nanos_to_percentage`]) for a connection of `user` with `client_id` at `now_ms`, and
    /// returns how long to throttle it: 0 within quota or without one, else Kafka's throttle time
    /// for the measured rate (capped at one window for `request_percentage`). The value is
    /// counted even when the answer is to throttle, as in Kafka.
    ///
    /// For `controller_mutation_rate` this is the permissive mode of
    /// [`QuotaManager::record_controller_mutations`] (value = partitions mutated).
    pub fn record_and_get_throttle_ms(
        &mut self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: i64,
    ) -> u64 {
        if key == QuotaKey::ControllerMutationRate {
            return self
                .record_controller_mutations(user, client_id, value, false, now_ms)
                .throttle_ms();
        }
        self.maybe_expire(now_ms);
        let Some((bound, u, c)) = self.config.quota_tags_for(key, user, client_id) else {
            return 0;
        };
        let rate_config = self.settings.rate;
        let Some(Sensor {
            meter: Meter::Rate(rate),
            throttle_count,
            throttle_time_ms_total,
            ..
        }) = self.sensor(key, u, c, bound, now_ms)
        else {
            return 0;
        };
        rate.record(&rate_config, value, now_ms);
        let observed = rate.measure(&rate_config, now_ms);
        // Kafka's Quota.acceptable for an upper bound: value <= bound.
        if observed <= bound {
            return 0;
        }
        let window_ms = rate.window_size_ms(&rate_config, now_ms);
        let throttle = if key == QuotaKey::RequestPercentage {
            let one_window = u64::try_from(rate_config.window_ms()).unwrap_or(u64::MAX);
            bounded_throttle_time_ms(observed, bound, window_ms, one_window)
        } else {
            throttle_time_ms(observed, bound, window_ms)
        };
        if throttle > 0 {
            *throttle_count += 1;
            *throttle_time_ms_total = throttle_time_ms_total.saturating_add(throttle);
        }
        throttle
    }

    /// Records `thread_time_nanos` of request-handler time against the `request_percentage`
    /// quota and returns the throttle time (Kafka's
    /// `ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs`).
    pub fn record_request_time_and_get_throttle_ms(
        &mut self,
        user: &str,
        client_id: &str,
        thread_time_nanos: u64,
        now_ms: i64,
    ) -> u64 {
        self.record_and_get_throttle_ms(
            QuotaKey::RequestPercentage,
            user,
            client_id,
            nanos_to_percentage(thread_time_nanos),
            now_ms,
        )
    }

    /// Records `value` without deciding on a throttle; it counts against the next request
    /// (Kafka's `recordNoThrottle`, used for network-thread time after a response is sent).
    pub fn record_no_throttle(
        &mut self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: i64,
    ) {
        self.maybe_expire(now_ms);
        let Some((bound, u, c)) = self.config.quota_tags_for(key, user, client_id) else {
            return;
        };
        let rate_config = self.settings.rate;
        match self.sensor(key, u, c, bound, now_ms).map(|s| &mut s.meter) {
            Some(Meter::Rate(rate)) => rate.record(&rate_config, value, now_ms),
            Some(Meter::Bucket(bucket)) => bucket.record(&rate_config, bound, value, now_ms),
            None => {}
        }
    }

    /// Records `partitions` created or deleted by CreateTopics, CreatePartitions or DeleteTopics
    /// against the `controller_mutation_rate` quota (KIP-599), Kafka's token bucket.
    ///
    /// `strict` (request versions that know THROTTLING_QUOTA_EXCEEDED: CreateTopics v6+,
    /// CreatePartitions v3+, DeleteTopics v5+): while the bucket is in debt the mutation is
    /// [`MutationDecision::Rejected`] and not recorded; otherwise it is accepted whatever its
    /// size, unthrottled. Permissive (older versions): always accepted and recorded, throttled
    /// once the bucket is in debt. The throttle time is the time for the bucket to get back to
    /// zero; Kafka reports it, less the time since, in the response's `throttle_time_ms`.
    pub fn record_controller_mutations(
        &mut self,
        user: &str,
        client_id: &str,
        partitions: f64,
        strict: bool,
        now_ms: i64,
    ) -> MutationDecision {
        self.maybe_expire(now_ms);
        let key = QuotaKey::ControllerMutationRate;
        let Some((bound, u, c)) = self.config.quota_tags_for(key, user, client_id) else {
            return MutationDecision::Accepted { throttle_ms: 0 };
        };
        let rate_config = self.settings.rate;
        let Some(Sensor {
            meter: Meter::Bucket(bucket),
            throttle_count,
            throttle_time_ms_total,
            ..
        }) = self.sensor(key, u, c, bound, now_ms)
        else {
            return MutationDecision::Accepted { throttle_ms: 0 };
        };
        let decision = if strict {
            let tokens = bucket.measure(&rate_config, bound, now_ms);
            if tokens < 0.0 {
                MutationDecision::Rejected {
                    throttle_ms: token_bucket_throttle_ms(tokens, bound),
                }
            } else {
                bucket.record(&rate_config, bound, partitions, now_ms);
                MutationDecision::Accepted { throttle_ms: 0 }
            }
        } else {
            bucket.record(&rate_config, bound, partitions, now_ms);
            let tokens = bucket.measure(&rate_config, bound, now_ms);
            MutationDecision::Accepted {
                throttle_ms: token_bucket_throttle_ms(tokens, bound),
            }
        };
        let throttle = decision.throttle_ms();
        if throttle > 0 {
            *throttle_count += 1;
            *throttle_time_ms_total = throttle_time_ms_total.saturating_add(throttle);
        }
        decision
    }

    /// Takes back `value` recorded earlier (Kafka's `unrecordQuotaSensor`): a fetch that is
    /// throttled is answered empty, so its bytes must not count.
    pub fn unrecord(
        &mut self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        value: f64,
        now_ms: i64,
    ) {
        self.record_no_throttle(key, user, client_id, -value, now_ms);
    }

    /// Records request time of a principal exempt from request quotas (Kafka exempts requests
    /// authorized by ClusterAction, i.e. inter-broker traffic), for the `exempt-request-time`
    /// metric only.
    pub fn record_exempt(&mut self, thread_time_nanos: u64, now_ms: i64) {
        let rate_config = self.settings.rate;
        self.exempt
            .record(&rate_config, nanos_to_percentage(thread_time_nanos), now_ms);
    }

    /// The exempt request time as a percentage of one thread, at `now_ms`.
    pub fn exempt_rate(&self, now_ms: i64) -> f64 {
        self.exempt.peek(&self.settings.rate, now_ms)
    }

    /// The most that can be recorded at once without being throttled for certain, even by an
    /// idle client: `bound × (samples − 1) × window seconds` (Kafka's
    /// `getMaxValueInQuotaWindow`, which caps a fetch response's size). `None` without a quota.
    pub fn max_value_in_quota_window(
        &self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
    ) -> Option<f64> {
        let (bound, _) = self.config.quota_for(key, user, client_id)?;
        let rate = &self.settings.rate;
        Some(bound * f64::from(rate.samples() - 1) * (rate.window_ms() as f64 / 1000.0))
    }

    /// Drops every sensor idle for longer than the expiration time, returning how many.
    pub fn expire_idle_sensors(&mut self, now_ms: i64) -> usize {
        let limit = self.settings.inactive_sensor_expiration_ms;
        self.next_expiry_check_ms = Some(now_ms.saturating_add(EXPIRY_CHECK_INTERVAL_MS));
        // Kafka's Sensor.hasExpired: idle time strictly greater than the limit.
        self.sensors
            .iter_mut()
            .map(|t| t.retain(|s| now_ms.saturating_sub(s.last_record_ms) <= limit))
            .sum()
    }

    /// How many sensors exist.
    pub fn sensor_count(&self) -> usize {
        self.sensors.iter().map(|t| t.len).sum()
    }

    /// The stats of the sensor for `key` and `metric_key`, with its rate at `now_ms`.
    pub fn sensor_stats(
        &self,
        key: QuotaKey,
        metric_key: &MetricKey,
        now_ms: i64,
    ) -> Option<SensorStats> {
        let sensor = self.sensors[key.index()].get(&metric_key.user, &metric_key.client_id)?;
        Some(self.stats_of(key, &metric_key.user, &metric_key.client_id, sensor, now_ms))
    }

    /// The stats of every sensor at `now_ms`, sorted by key then bucket.
    pub fn all_sensor_stats(&self, now_ms: i64) -> Vec<SensorStats> {
        let mut out: Vec<SensorStats> = QuotaKey::ALL
            .into_iter()
            .flat_map(|key| {
                self.sensors[key.index()]
                    .iter()
                    .map(move |(u, c, s)| self.stats_of(key, u, c, s, now_ms))
            })
            .collect();
        out.sort_by(|a, b| (a.key, &a.metric_key).cmp(&(b.key, &b.metric_key)));
        out
    }

    /// The measured rate of whatever bucket a connection of `user` and `client_id` is counted
    /// in for `key`, at `now_ms`; `None` without a quota or before anything was recorded.
    pub fn current_rate(
        &self,
        key: QuotaKey,
        user: &str,
        client_id: &str,
        now_ms: i64,
    ) -> Option<f64> {
        let (_, u, c) = self.config.quota_tags_for(key, user, client_id)?;
        let sensor = self.sensors[key.index()].get(u, c)?;
        Some(self.peek(sensor, now_ms))
    }

    fn stats_of(
        &self,
        key: QuotaKey,
        user_tag: &str,
        client_tag: &str,
        s: &Sensor,
        now_ms: i64,
    ) -> SensorStats {
        SensorStats {
            key,
            metric_key: MetricKey::new(user_tag, client_tag),
            rate: self.peek(s, now_ms),
            bound: s.bound,
            throttle_count: s.throttle_count,
            throttle_time_ms_total: s.throttle_time_ms_total,
            last_record_ms: s.last_record_ms,
        }
    }

    fn peek(&self, sensor: &Sensor, now_ms: i64) -> f64 {
        match &sensor.meter {
            Meter::Rate(rate) => rate.peek(&self.settings.rate, now_ms),
            Meter::Bucket(bucket) => bucket.peek(&self.settings.rate, sensor.bound, now_ms),
        }
    }

    /// The sensor of the bucket tagged (`user_tag`, `client_tag`), created empty if absent,
    /// marked as recorded at `now_ms` under `bound`. Always `Some`; an `Option` only so that no
    /// code path can panic.
    fn sensor(
        &mut self,
        key: QuotaKey,
        user_tag: &str,
        client_tag: &str,
        bound: f64,
        now_ms: i64,
    ) -> Option<&mut Sensor> {
        let sensor = self.sensors[key.index()].get_or_insert(user_tag, client_tag, || Sensor {
            meter: Meter::for_key(key),
            bound,
            last_record_ms: now_ms,
            throttle_count: 0,
            throttle_time_ms_total: 0,
        })?;
        sensor.bound = bound;
        sensor.last_record_ms = now_ms;
        Some(sensor)
    }

    /// Sweeps idle sensors when the last sweep is [`EXPIRY_CHECK_INTERVAL_MS`] old.
    fn maybe_expire(&mut self, now_ms: i64) {
        match self.next_expiry_check_ms {
            Some(next) if now_ms < next => {}
            Some(_) => {
                self.expire_idle_sensors(now_ms);
            }
            None => {
                self.next_expiry_check_ms = Some(now_ms.saturating_add(EXPIRY_CHECK_INTERVAL_MS))
            }
        }
    }
}

#[cfg(test)]
#[path = "manager_test.rs"]
mod tests;
