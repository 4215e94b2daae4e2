//! Kafka's throttle-time formula, `round((O − T) / T × W)`, on values worked by hand, and the
//! KIP-219 connection mute.

use super::*;

#[test]
fn within_quota_is_not_throttled() {
    assert_eq!(throttle_time_ms(100.0, 100.0, 10_000), 0);
    assert_eq!(throttle_time_ms(99.9, 100.0, 10_000), 0);
    assert_eq!(throttle_time_ms(0.0, 100.0, 10_000), 0);
    assert_eq!(throttle_time_ms(f64::NAN, 100.0, 10_000), 0);
}

#[test]
fn known_values() {
    // Twice the quota over 10 s: (200 − 100) / 100 × 10 000 = 10 000 ms.
    assert_eq!(throttle_time_ms(200.0, 100.0, 10_000), 10_000);
    // Half again the quota over 11 s: (150 − 100) / 100 × 11 000 = 5500 ms.
    assert_eq!(throttle_time_ms(150.0, 100.0, 11_000), 5_500);
    // 1100/s against 1000/s over 10 s: 100 / 1000 × 10 000 = 1000 ms.
    assert_eq!(throttle_time_ms(1100.0, 1000.0, 10_000), 1_000);
    // Rounded to the nearest ms, halves up (Java's Math.round): (1536 − 1024) / 1024 × 1001
    // = 0.5 × 1001 = 500.5 → 501.
    assert_eq!(throttle_time_ms(1536.0, 1024.0, 1001), 501);
    // 0.25 × 1001 = 250.25 → 250.
    assert_eq!(throttle_time_ms(1280.0, 1024.0, 1001), 250);
}

#[test]
fn capped_to_fit_the_wire() {
    // (10¹² − 1) / 1 × 11 000 ≈ 1.1 × 10¹⁶ ms: far past int32, so the cap.
    assert_eq!(throttle_time_ms(1e12, 1.0, 11_000), MAX_THROTTLE_TIME_MS);
    assert_eq!(
        throttle_time_ms(f64::INFINITY, 1.0, 11_000),
        MAX_THROTTLE_TIME_MS
    );
}

#[test]
fn bounded_throttle_time() {
    // (300 − 100) / 100 × 10 000 = 20 000, bounded at one window of 1000.
    assert_eq!(bounded_throttle_time_ms(300.0, 100.0, 10_000, 1_000), 1_000);
    // Under the bound: unchanged. (110 − 100) / 100 × 5000 = 500.
    assert_eq!(bounded_throttle_time_ms(110.0, 100.0, 5_000, 1_000), 500);
}

#[test]
fn nanos_as_percent_of_a_thread() {
    // One second of one thread is 100 percent-seconds; 10 ms is 1.
    assert_eq!(nanos_to_percentage(1_000_000_000), 100.0);
    assert_eq!(nanos_to_percentage(10_000_000), 1.0);
    assert_eq!(nanos_to_percentage(0), 0.0);
}

#[test]
fn channel_mute_lasts_the_throttle_time() {
    let mut ch = ChannelThrottle::new();
    assert!(!ch.is_muted(0));
    assert_eq!(ch.remaining_ms(0), 0);
    ch.throttle(1_000, 0);
    assert_eq!(ch.unmute_at_ms(), None);
    ch.throttle(1_000, 250);
    assert_eq!(ch.unmute_at_ms(), Some(1_250));
    assert!(ch.is_muted(1_000));
    assert!(ch.is_muted(1_249));
    assert_eq!(ch.remaining_ms(1_100), 150);
    assert!(!ch.is_muted(1_250));
    assert_eq!(ch.remaining_ms(2_000), 0);
}

#[test]
fn overlapping_throttles_extend_but_never_shorten() {
    let mut ch = ChannelThrottle::new();
    ch.throttle(0, 1_000);
    // A shorter throttle decided later does not cut the first one short.
    ch.throttle(100, 200);
    assert_eq!(ch.unmute_at_ms(), Some(1_000));
    // A later, longer one extends it; the two do not add up.
    ch.throttle(500, 1_000);
    assert_eq!(ch.unmute_at_ms(), Some(1_500));
    // Saturates rather than overflows.
    ch.throttle(i64::MAX - 1, u64::MAX);
    assert_eq!(ch.unmute_at_ms(), Some(i64::MAX));
}
