//! Recording and throttling end to end with a hand-driven clock (`now_ms` values), defaults of
//! 11 windows of 1 s. For a fresh sensor everything recorded at t=0 is measured over 10 s (see
//! `rate_test.rs`), so "rate = total / 10" in the arithmetic below.

use super::*;
use crate::entity::{EntityName, QuotaEntity};

fn manager() -> QuotaManager {
    QuotaManager::new(QuotaManagerConfig::default())
}

fn with_quota(entity: QuotaEntity, key: QuotaKey, value: f64) -> QuotaManager {
    let mut m = manager();
    m.config_mut().set(&entity, key, value).unwrap();
    m
}

const P: QuotaKey = QuotaKey::ProducerByteRate;

#[test]
fn no_quota_no_throttle_no_sensor() {
    let mut m = manager();
    assert_eq!(m.record_and_get_throttle_ms(P, "alice", "app", 1e12, 0), 0);
    assert_eq!(m.sensor_count(), 0);
    assert_eq!(m.current_rate(P, "alice", "app", 0), None);
    assert_eq!(m.max_value_in_quota_window(P, "alice", "app"), None);
}

#[test]
fn under_quota_is_not_throttled() {
    // Quota 1000 B/s. 5000 at t=0 is 500/s; another 5000 at t=0 is 1000/s: equal is allowed.
    let mut m = with_quota(QuotaEntity::client("app"), P, 1000.0);
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 5000.0, 0), 0);
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 5000.0, 0), 0);
    assert_eq!(m.current_rate(P, "u", "app", 0), Some(1000.0));
}

#[test]
fn over_quota_throttle_time() {
    // Quota 1000 B/s. 5000 then 6000 at t=0: 11 000 / 10 s = 1100/s.
    // Throttle = (1100 − 1000) / 1000 × 10 000 ms = 1000 ms.
    let mut m = with_quota(QuotaEntity::client("app"), P, 1000.0);
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 5000.0, 0), 0);
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 6000.0, 0), 1000);
    // The value counted although throttled: 9000 more at t=0 is 20 000 / 10 = 2000/s,
    // (2000 − 1000) / 1000 × 10 000 = 10 000 ms.
    assert_eq!(
        m.record_and_get_throttle_ms(P, "u", "app", 9000.0, 0),
        10_000
    );
    let stats = m.sensor_stats(P, &MetricKey::new("", "app"), 0).unwrap();
    assert_eq!(stats.throttle_count, 2);
    assert_eq!(stats.throttle_time_ms_total, 11_000);
    assert_eq!(stats.rate, 2000.0);
    assert_eq!(stats.bound, 1000.0);
    assert_eq!(stats.last_record_ms, 0);
}

#[test]
fn steady_producer_over_quota() {
    // 2000 bytes at each whole second against 1000 B/s. At t=20 s the rate is 22 000 / 10 s
    // = 2200/s (rate_test: one_record_per_window_spans_ten_windows), so the throttle is
    // (2200 − 1000) / 1000 × 10 000 = 12 000 ms.
    let mut m = with_quota(QuotaEntity::user("alice"), P, 1000.0);
    let mut last = 0;
    for s in 0..=20 {
        last = m.record_and_get_throttle_ms(P, "alice", "app", 2000.0, s * 1000);
    }
    assert_eq!(last, 12_000);
    // A second later the oldest live window (10 000) has expired: windows 11 000..=20 000 hold
    // 20 000 bytes over 10 s, 2000/s. Eleven seconds after the last record nothing is left.
    assert_eq!(m.current_rate(P, "alice", "app", 21_000), Some(2000.0));
    assert_eq!(m.current_rate(P, "alice", "app", 31_000), Some(0.0));
}

#[test]
fn user_quota_is_shared_by_the_users_clients() {
    // /config/users/alice: 1000 B/s for all of alice's clients together.
    let mut m = with_quota(QuotaEntity::user("alice"), P, 1000.0);
    assert_eq!(m.record_and_get_throttle_ms(P, "alice", "c1", 6000.0, 0), 0);
    // c2 adds 5000: the shared bucket holds 11 000, 1100/s, so 1000 ms.
    assert_eq!(
        m.record_and_get_throttle_ms(P, "alice", "c2", 5000.0, 0),
        1000
    );
    assert_eq!(m.sensor_count(), 1);
    assert!(m.sensor_stats(P, &MetricKey::new("alice", ""), 0).is_some());
    // Another user has no quota at all.
    assert_eq!(m.record_and_get_throttle_ms(P, "bob", "c2", 1e9, 0), 0);
}

#[test]
fn client_quota_is_shared_by_all_users_of_the_client_id() {
    let mut m = with_quota(QuotaEntity::client("app"), P, 1000.0);
    assert_eq!(
        m.record_and_get_throttle_ms(P, "alice", "app", 6000.0, 0),
        0
    );
    assert_eq!(
        m.record_and_get_throttle_ms(P, "bob", "app", 5000.0, 0),
        1000
    );
    assert_eq!(m.sensor_count(), 1);
}

#[test]
fn default_user_quota_gives_each_user_a_bucket() {
    let mut m = with_quota(QuotaEntity::default_user(), P, 1000.0);
    assert_eq!(
        m.record_and_get_throttle_ms(P, "alice", "c", 11_000.0, 0),
        1000
    );
    // Bob is not held back by alice's usage.
    assert_eq!(m.record_and_get_throttle_ms(P, "bob", "c", 5000.0, 0), 0);
    assert_eq!(m.sensor_count(), 2);
}

#[test]
fn user_client_levels_count_each_pair() {
    // /config/users/<default>/clients/<default>: one bucket per (user, client id).
    let entity = QuotaEntity::user_client(EntityName::Default, EntityName::Default);
    let mut m = with_quota(entity, P, 1000.0);
    assert_eq!(
        m.record_and_get_throttle_ms(P, "alice", "c1", 10_000.0, 0),
        0
    );
    assert_eq!(
        m.record_and_get_throttle_ms(P, "alice", "c2", 10_000.0, 0),
        0
    );
    assert_eq!(m.record_and_get_throttle_ms(P, "bob", "c1", 10_000.0, 0), 0);
    assert_eq!(m.sensor_count(), 3);
    // A more specific quota for alice overrides the default and moves her to a shared bucket.
    m.config_mut()
        .set(&QuotaEntity::user("alice"), P, 1000.0)
        .unwrap();
    assert_eq!(
        m.record_and_get_throttle_ms(P, "alice", "c1", 10_000.0, 0),
        0
    );
    assert_eq!(
        m.record_and_get_throttle_ms(P, "alice", "c2", 1_000.0, 0),
        1000
    );
}

#[test]
fn quota_keys_are_counted_apart() {
    let mut m = with_quota(QuotaEntity::client("app"), P, 1000.0);
    m.config_mut()
        .set(
            &QuotaEntity::client("app"),
            QuotaKey::ConsumerByteRate,
            1000.0,
        )
        .unwrap();
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 10_000.0, 0), 0);
    assert_eq!(
        m.record_and_get_throttle_ms(QuotaKey::ConsumerByteRate, "u", "app", 10_000.0, 0),
        0
    );
    assert_eq!(m.sensor_count(), 2);
}

#[test]
fn a_changed_quota_applies_to_the_next_record() {
    // 5000 at t=0 is 500/s: fine under 1000. Lowered to 400, a record of nothing measures
    // 500/s: (500 − 400) / 400 × 10 000 = 2500 ms.
    let mut m = with_quota(QuotaEntity::client("app"), P, 1000.0);
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 5000.0, 0), 0);
    m.config_mut()
        .set(&QuotaEntity::client("app"), P, 400.0)
        .unwrap();
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 0.0, 0), 2500);
    // Removed: not throttled, not recorded.
    m.config_mut().remove(&QuotaEntity::client("app"), P);
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 1e9, 0), 0);
    assert_eq!(m.current_rate(P, "u", "app", 0), None);
}

#[test]
fn unrecord_takes_a_throttled_fetch_back() {
    let c = QuotaKey::ConsumerByteRate;
    let mut m = with_quota(QuotaEntity::client("app"), c, 1000.0);
    assert_eq!(m.record_and_get_throttle_ms(c, "u", "app", 5000.0, 0), 0);
    // A 6000-byte response pushes the bucket to 1100/s: throttled, answered empty, taken back.
    assert_eq!(m.record_and_get_throttle_ms(c, "u", "app", 6000.0, 0), 1000);
    m.unrecord(c, "u", "app", 6000.0, 0);
    assert_eq!(m.current_rate(c, "u", "app", 0), Some(500.0));
}

#[test]
fn record_no_throttle_counts_against_the_next_request() {
    let mut m = with_quota(QuotaEntity::client("app"), P, 1000.0);
    m.record_no_throttle(P, "u", "app", 10_000.0, 0);
    // 10 000 + 1000 = 11 000 / 10 s = 1100/s: 1000 ms.
    assert_eq!(m.record_and_get_throttle_ms(P, "u", "app", 1000.0, 0), 1000);
}

#[test]
fn request_percentage() {
    // request_percentage = 50: half of one thread. 4 s of thread time at t=0 is 400
    // percent-seconds over 10 s = 40%: fine.
    let r = QuotaKey::RequestPercentage;
    let mut m = with_quota(QuotaEntity::user("alice"), r, 50.0);
    assert_eq!(
        m.record_request_time_and_get_throttle_ms("alice", "c", 4_000_000_000, 0),
        0
    );
    assert_eq!(m.current_rate(r, "alice", "c", 0), Some(40.0));
    // 1.5 s more: 550 / 10 = 55%. (55 − 50) / 50 × 10 000 = 1000 ms, exactly one window.
    assert_eq!(
        m.record_request_time_and_get_throttle_ms("alice", "c", 1_500_000_000, 0),
        1000
    );
    // 2 s more: 750 / 10 = 75%. (75 − 50) / 50 × 10 000 = 5000 ms, capped at one window
    // (quota.window.size.seconds) as Kafka's ClientRequestQuotaManager does.
    assert_eq!(
        m.record_request_time_and_get_throttle_ms("alice", "c", 2_000_000_000, 0),
        1000
    );
    // Byte-rate quotas are not capped that way (see over_quota_throttle_time: 10 000 ms).
}

#[test]
fn exempt_request_time_is_only_measured() {
    let mut m = manager();
    // 1 s of thread time at t=0: 100 percent-seconds over 10 s = 10%.
    m.record_exempt(1_000_000_000, 0);
    assert_eq!(m.exempt_rate(0), 10.0);
    assert_eq!(m.sensor_count(), 0);
}

#[test]
fn max_value_in_quota_window() {
    // bound × (samples − 1) × window seconds = 1000 × 10 × 1.
    let m = with_quota(
        QuotaEntity::client("app"),
        QuotaKey::ConsumerByteRate,
        1000.0,
    );
    assert_eq!(
        m.max_value_in_quota_window(QuotaKey::ConsumerByteRate, "u", "app"),
        Some(10_000.0)
    );
    // Recording exactly that much into a fresh sensor is not throttled; one byte more is.
    let mut m = m;
    let c = QuotaKey::ConsumerByteRate;
    assert_eq!(m.record_and_get_throttle_ms(c, "u", "app", 10_000.0, 0), 0);
    assert!(m.record_and_get_throttle_ms(c, "u", "app", 1.0, 0) > 0);
}

#[test]
fn idle_sensors_expire_after_an_hour() {
    let mut m = with_quota(QuotaEntity::default_client(), P, 1000.0);
    m.record_and_get_throttle_ms(P, "u", "a", 1.0, 0);
    m.record_and_get_throttle_ms(P, "u", "b", 1.0, 1000);
    assert_eq!(m.sensor_count(), 2);
    // Idle for exactly an hour is not expired (Kafka: strictly longer than the limit).
    assert_eq!(m.expire_idle_sensors(3_600_000), 0);
    assert_eq!(m.expire_idle_sensors(3_600_001), 1);
    assert!(m
        .sensor_stats(P, &MetricKey::new("", "b"), 3_600_001)
        .is_some());
    assert_eq!(m.expire_idle_sensors(3_601_001), 1);
    assert_eq!(m.sensor_count(), 0);
    // No empty per-user tables are left behind either.
    assert!(m.sensors.iter().all(|t| t.by_user.is_empty()));
}

#[test]
fn recording_sweeps_idle_sensors_without_a_timer() {
    let mut m = with_quota(QuotaEntity::default_client(), P, 1000.0);
    for i in 0..100 {
        m.record_and_get_throttle_ms(P, "u", &format!("client-{i}"), 1.0, 0);
    }
    assert_eq!(m.sensor_count(), 100);
    // An hour and a sweep interval later, one more record drops the 100 idle ones.
    let later = INACTIVE_SENSOR_EXPIRATION_MS + EXPIRY_CHECK_INTERVAL_MS;
    m.record_and_get_throttle_ms(P, "u", "fresh", 1.0, later);
    assert_eq!(m.sensor_count(), 1);
    // A sensor in use is never dropped.
    for minute in 1..=120 {
        m.record_and_get_throttle_ms(P, "u", "fresh", 1.0, later + minute * 60_000);
    }
    assert_eq!(m.sensor_count(), 1);
}

#[test]
fn all_sensor_stats_for_metrics() {
    let mut m = with_quota(QuotaEntity::default_client(), P, 1000.0);
    m.config_mut()
        .set(
            &QuotaEntity::user("alice"),
            QuotaKey::RequestPercentage,
            10.0,
        )
        .unwrap();
    m.record_and_get_throttle_ms(P, "alice", "b", 2000.0, 0);
    m.record_and_get_throttle_ms(P, "alice", "a", 20_000.0, 0);
    m.record_request_time_and_get_throttle_ms("alice", "a", 100_000_000, 0);
    let stats = m.all_sensor_stats(0);
    let summary: Vec<_> = stats
        .iter()
        .map(|s| (s.key, s.metric_key.to_string(), s.rate, s.throttle_count))
        .collect();
    // a: 20 000 / 10 = 2000/s over 1000: throttled once. b: 200/s. Request: 0.1 s = 10
    // percent-seconds over 10 s = 1%.
    assert_eq!(
        summary,
        vec![
            (P, r#"user="" client-id="a""#.to_owned(), 2000.0, 1),
            (P, r#"user="" client-id="b""#.to_owned(), 200.0, 0),
            (
                QuotaKey::RequestPercentage,
                r#"user="alice" client-id="""#.to_owned(),
                1.0,
                0
            ),
        ]
    );
    // Reading metrics changes nothing: a later measurement is the same either way.
    let again = m.all_sensor_stats(5_000);
    assert_eq!(again, m.all_sensor_stats(5_000));
}

#[test]
fn controller_mutations_permissive() {
    // controller_mutation_rate 10/s: a bucket of 11 × 1 × 10 = 110 tokens, starting full.
    // 100 partitions leave 10; 30 more leave −20, which takes 20 / 10 s = 2000 ms to repay.
    let k = QuotaKey::ControllerMutationRate;
    let mut m = with_quota(QuotaEntity::user("alice"), k, 10.0);
    assert_eq!(m.record_and_get_throttle_ms(k, "alice", "c", 100.0, 0), 0);
    assert_eq!(
        m.record_controller_mutations("alice", "c", 30.0, false, 0),
        MutationDecision::Accepted { throttle_ms: 2000 }
    );
    // The metric is the tokens left: −20 at t=0, −10 a second later.
    assert_eq!(m.current_rate(k, "alice", "c", 0), Some(-20.0));
    assert_eq!(
        m.current_rate(k, "alice", "other-client", 1000),
        Some(-10.0)
    );
    let stats = m.sensor_stats(k, &MetricKey::new("alice", ""), 0).unwrap();
    assert_eq!(
        (stats.throttle_count, stats.throttle_time_ms_total),
        (1, 2000)
    );
}

#[test]
fn controller_mutations_strict() {
    let k = QuotaKey::ControllerMutationRate;
    let mut m = with_quota(QuotaEntity::user("alice"), k, 10.0);
    // Not in debt: accepted whatever the size, and not throttled (110 → 10 → −20).
    let accepted = MutationDecision::Accepted { throttle_ms: 0 };
    assert_eq!(
        m.record_controller_mutations("alice", "c", 100.0, true, 0),
        accepted
    );
    assert_eq!(
        m.record_controller_mutations("alice", "c", 30.0, true, 0),
        accepted
    );
    // In debt (−20 + 10 refilled = −10 at t=1 s): rejected, not recorded, 10 / 10 s = 1000 ms.
    let d = m.record_controller_mutations("alice", "c", 1.0, true, 1000);
    assert_eq!(d, MutationDecision::Rejected { throttle_ms: 1000 });
    assert!(!d.is_accepted());
    assert_eq!(m.current_rate(k, "alice", "c", 1000), Some(-10.0));
    // At t=2 s the bucket is back at 0: accepted again (leaving −1).
    assert_eq!(
        m.record_controller_mutations("alice", "c", 1.0, true, 2000),
        accepted
    );
    assert_eq!(m.current_rate(k, "alice", "c", 2000), Some(-1.0));
    // Without a quota nothing is held back.
    assert_eq!(
        m.record_controller_mutations("bob", "c", 1e9, true, 0),
        accepted
    );
}
