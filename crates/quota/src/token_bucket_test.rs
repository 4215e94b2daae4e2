//! The controller-mutation token bucket, worked by hand: quota 10/s with the default 11 windows
//! of 1 s gives a burst of 11 × 1 × 10 = 110 tokens.

use super::*;

fn cfg() -> RateConfig {
    RateConfig::default()
}

#[test]
fn starts_full_and_refills_at_the_quota() {
    let mut b = TokenBucket::new();
    assert_eq!(TokenBucket::burst(&cfg(), 10.0), 110.0);
    assert_eq!(b.measure(&cfg(), 10.0, 0), 110.0);
    b.record(&cfg(), 10.0, 100.0, 0);
    assert_eq!(b.measure(&cfg(), 10.0, 0), 10.0);
    b.record(&cfg(), 10.0, 30.0, 0);
    assert_eq!(b.measure(&cfg(), 10.0, 0), -20.0);
    // 1.5 s refills 15.
    assert_eq!(b.peek(&cfg(), 10.0, 1500), -5.0);
    // Never above the burst, however long idle.
    assert_eq!(b.measure(&cfg(), 10.0, 1_000_000), 110.0);
}

#[test]
fn throttle_time_is_the_time_back_to_zero() {
    // −20 tokens at 10/s: 2 s.
    assert_eq!(token_bucket_throttle_ms(-20.0, 10.0), 2000);
    // −0.0125 at 10/s: 1.25 ms → 1.
    assert_eq!(token_bucket_throttle_ms(-0.0125, 10.0), 1);
    assert_eq!(token_bucket_throttle_ms(0.0, 10.0), 0);
    assert_eq!(token_bucket_throttle_ms(5.0, 10.0), 0);
    assert_eq!(
        token_bucket_throttle_ms(-1e300, 1.0),
        crate::throttle::MAX_THROTTLE_TIME_MS
    );
}
