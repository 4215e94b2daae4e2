//! The client quotas this broker enforces (KIP-13 byte rates, KIP-55 user and client-id
//! entities, KIP-124 request time, KIP-219 throttling), as the controller quorum stores them
//! (AlterClientQuotas): the arithmetic is ferry-quota's [`QuotaManager`]; this module feeds it
//! the metadata image's quotas and the request path's measurements, and says how long to
//! throttle.
//!
//! How a throttle is applied is the connection's business (server::connection): the response
//! carries `throttle_time_ms` and is sent at once, and the connection reads nothing more from
//! the client for that long (the channel is muted), as Kafka does since KIP-219. A throttled
//! fetch is answered without records, and its bytes do not count.
//!
//! Who is measured: the principal's name (`ANONYMOUS` on unauthenticated listeners) and the
//! client id, resolved with Kafka's eight levels of precedence. Requests from other brokers are
//! exempt, as Kafka exempts requests authorized by CLUSTER_ACTION. Without any quota set no lock
//! is taken.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ferry_cluster::security::{
    QuotaEntity as StoredEntity, QuotaValue, ENTITY_CLIENT_ID, ENTITY_USER,
};
use ferry_quota::{EntityName, QuotaEntity, QuotaKey, QuotaManager, QuotaManagerConfig};

/// What a consumer's fetch response comes to under its quota.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FetchThrottle {
    /// How long to throttle the client (zero: not at all).
    pub throttle: Duration,
    /// Whether to answer without records (they are fetched again after the throttle).
    pub drop_records: bool,
}

/// The quotas as the metadata image holds them.
type StoredQuotas = BTreeMap<StoredEntity, BTreeMap<String, QuotaValue>>;

/// This broker's quota state.
pub struct ClientQuotas {
    manager: Mutex<QuotaManager>,
    /// Whether any user or client-id quota is in force; the request path checks only this when
    /// none is.
    any: AtomicBool,
    /// The image's quotas last applied, to skip unchanged images.
    applied: Mutex<Option<StoredQuotas>>,
}

impl ClientQuotas {
    /// No quota yet, measured over `settings`' windows (`quota.window.num`,
    /// `quota.window.size.seconds`).
    pub fn new(settings: QuotaManagerConfig) -> Self {
        Self {
            manager: Mutex::new(QuotaManager::new(settings)),
            any: AtomicBool::new(false),
            applied: Mutex::new(None),
        }
    }

    fn manager(&self) -> std::sync::MutexGuard<'_, QuotaManager> {
        // A poisoned lock only means a panic while recording: the sensors are still usable.
        self.manager.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts the image's quotas in force (the next request is measured against them).
    pub fn follow_image(&self, quotas: &StoredQuotas) {
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        if applied.as_ref() == Some(quotas) {
            return;
        }
        let entries: Vec<(QuotaEntity, QuotaKey, f64)> = quotas
            .iter()
            .filter_map(|(entity, values)| Some((user_or_client_entity(entity)?, values)))
            .flat_map(|(entity, values)| {
                values.iter().filter_map(move |(key, value)| {
                    let key = QuotaKey::parse(key).ok()?;
                    key.applies_to_user_or_client()
                        .then(|| (entity.clone(), key, value.0))
                })
            })
            .collect();
        let any = !entries.is_empty();
        match self.manager().config_mut().replace_all(entries) {
            Ok(()) => {
                self.any.store(any, Ordering::Release);
                *applied = Some(quotas.clone());
            }
            // The controller checked every value it stored: keep the quotas in force.
            Err(e) => {
                tracing::error!(error = %e, "cannot apply the metadata image's client quotas; the previous ones stay in force")
            }
        }
    }

    /// Whether no quota is in force (nothing to measure).
    pub fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Records a produce request of `bytes` and returns the throttle time.
    pub fn produce(&self, user: &str, client_id: &str, bytes: usize, now_ms: i64) -> Duration {
        if self.is_empty() {
            return Duration::ZERO;
        }
        let ms = self.manager().record_and_get_throttle_ms(
            QuotaKey::ProducerByteRate,
            user,
            client_id,
            bytes as f64,
            now_ms,
        );
        Duration::from_millis(ms)
    }

    /// The most a fetch response may carry for this client (Kafka caps `max_bytes` with the
    /// quota window's worth), `None` without a consumer quota.
    pub fn fetch_limit(&self, user: &str, client_id: &str) -> Option<usize> {
        if self.is_empty() {
            return None;
        }
        let max = self.manager().max_value_in_quota_window(
            QuotaKey::ConsumerByteRate,
            user,
            client_id,
        )?;
        // At least one byte, so a fetch can still make progress (the broker returns a whole
        // first batch whatever the limit).
        Some(max.max(1.0) as usize)
    }

    /// Records a fetch response of `bytes` and says whether and how it is throttled.
    pub fn fetch(&self, user: &str, client_id: &str, bytes: usize, now_ms: i64) -> FetchThrottle {
        if self.is_empty() {
            return FetchThrottle::default();
        }
        let mut manager = self.manager();
        let key = QuotaKey::ConsumerByteRate;
        let value = bytes as f64;
        let ms = manager.record_and_get_throttle_ms(key, user, client_id, value, now_ms);
        if ms == 0 {
            return FetchThrottle::default();
        }
        // Kafka answers a throttled fetch without records and takes its bytes back. A response
        // larger than the whole quota window (one big batch) would then be refused for ever:
        // it is sent, counted, and the client throttled after it instead.
        let fits_a_window = manager
            .max_value_in_quota_window(key, user, client_id)
            .is_some_and(|max| value <= max);
        if fits_a_window {
            manager.unrecord(key, user, client_id, value, now_ms);
        }
        FetchThrottle {
            throttle: Duration::from_millis(ms),
            drop_records: fits_a_window,
        }
    }

    /// Records `spent` handling one request and returns the throttle time (`request_percentage`).
    pub fn request_time(
        &self,
        user: &str,
        client_id: &str,
        spent: Duration,
        now_ms: i64,
    ) -> Duration {
        if self.is_empty() {
            return Duration::ZERO;
        }
        let nanos = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        let ms = self
            .manager()
            .record_request_time_and_get_throttle_ms(user, client_id, nanos, now_ms);
        Duration::from_millis(ms)
    }
}

/// The quota entity of a stored user / client-id entity; `None` for `ip` entities (connection
/// rates, not enforced here).
fn user_or_client_entity(stored: &StoredEntity) -> Option<QuotaEntity> {
    let part = |ty: &str| {
        stored
            .0
            .get(ty)
            .map(|n| EntityName::from_wire(n.as_deref()))
    };
    let entity = QuotaEntity::new(part(ENTITY_USER), part(ENTITY_CLIENT_ID));
    (entity.user.is_some() || entity.client_id.is_some()).then_some(entity)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(parts: &[(&str, Option<&str>)], values: &[(&str, f64)]) -> StoredQuotas {
        let mut q = StoredQuotas::new();
        q.insert(
            StoredEntity::new(parts.iter().copied()),
            values
                .iter()
                .map(|(k, v)| (k.to_string(), QuotaValue(*v)))
                .collect(),
        );
        q
    }

    #[test]
    fn nothing_is_measured_without_quotas() {
        let q = ClientQuotas::new(QuotaManagerConfig::default());
        assert!(q.is_empty());
        assert_eq!(q.produce("alice", "app", 1 << 30, 0), Duration::ZERO);
        assert_eq!(q.fetch_limit("alice", "app"), None);
    }

    #[test]
    fn a_user_over_its_produce_rate_is_throttled_and_others_are_not() {
        let q = ClientQuotas::new(QuotaManagerConfig::default());
        q.follow_image(&stored(
            &[(ENTITY_USER, Some("alice"))],
            &[("producer_byte_rate", 1000.0)],
        ));
        assert!(!q.is_empty());
        // 1 MB at once from alice: far over 1 kB/s.
        assert!(q.produce("alice", "app", 1_000_000, 1_000) > Duration::ZERO);
        assert_eq!(q.produce("bob", "app", 1_000_000, 1_000), Duration::ZERO);
        // The quota removed: alice is free again.
        q.follow_image(&StoredQuotas::new());
        assert!(q.is_empty());
        assert_eq!(q.produce("alice", "app", 1_000_000, 2_000), Duration::ZERO);
    }

    #[test]
    fn a_throttled_fetch_does_not_count_and_fetches_are_capped() {
        let q = ClientQuotas::new(QuotaManagerConfig::default());
        q.follow_image(&stored(
            &[(ENTITY_CLIENT_ID, None)],
            &[("consumer_byte_rate", 1000.0)],
        ));
        // Ten windows' worth of the rate (Kafka's getMaxValueInQuotaWindow).
        assert_eq!(q.fetch_limit("anyone", "reader"), Some(10_000));
        // Within the window's worth but over the rate: answered without records, not counted.
        assert_eq!(
            q.fetch("anyone", "reader", 9_000, 1_000),
            FetchThrottle::default()
        );
        let second = q.fetch("anyone", "reader", 9_000, 1_001);
        assert!(second.throttle > Duration::ZERO && second.drop_records);
        // Taken back: a small fetch right after is measured without it.
        assert_eq!(
            q.fetch("anyone", "reader", 10, 1_002),
            FetchThrottle::default()
        );
        // One batch larger than the whole window could never be sent: it goes, throttled.
        let huge = q.fetch("anyone", "reader", 100_000, 1_003);
        assert!(huge.throttle > Duration::ZERO && !huge.drop_records);
    }

    #[test]
    fn ip_entities_are_left_to_connection_limits() {
        let q = ClientQuotas::new(QuotaManagerConfig::default());
        q.follow_image(&stored(
            &[("ip", Some("10.0.0.1"))],
            &[("connection_creation_rate", 5.0)],
        ));
        assert!(q.is_empty());
    }
}
