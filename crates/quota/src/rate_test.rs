//! Kafka's `Rate` over `WindowedSum`, worked by hand with the defaults (11 windows of 1 s) unless
//! a test says otherwise. Throughout: `window = max(elapsed since the oldest live window, with at
//! least 10 full windows assumed, 1 ms)` and `rate = sum / (window / 1000)`.

use super::*;

fn cfg() -> RateConfig {
    RateConfig::default()
}

#[test]
fn defaults_are_kafkas() {
    assert_eq!(cfg().samples(), 11);
    assert_eq!(cfg().window_ms(), 1000);
    assert_eq!(RateConfig::from_broker_config(11, 1), Ok(cfg()));
    assert_eq!(
        RateConfig::from_broker_config(5, 2).unwrap().window_ms(),
        2000
    );
    assert!(RateConfig::new(0, 1000).is_err());
    assert!(RateConfig::new(11, 0).is_err());
}

#[test]
fn a_new_sensor_assumes_ten_full_windows() {
    // One burst of 1000 at t=0, measured at once: elapsed 0 ms, 0 full windows < 10, so the
    // window is 0 + 10 × 1000 = 10 000 ms and the rate 1000 / 10 s = 100/s, not 1000/ms.
    let mut r = SampledRate::new();
    r.record(&cfg(), 1000.0, 0);
    assert_eq!(r.window_size_ms(&cfg(), 0), 10_000);
    assert_eq!(r.measure(&cfg(), 0), 100.0);
    // 500 ms later: elapsed 500, still 0 full windows, window 10 500 ms: 1000 / 10.5.
    assert_eq!(r.window_size_ms(&cfg(), 500), 10_500);
    assert_eq!(r.measure(&cfg(), 500), 1000.0 / 10.5);
}

#[test]
fn nothing_recorded_measures_zero() {
    let mut r = SampledRate::new();
    assert_eq!(r.measure(&cfg(), 12_345), 0.0);
    assert_eq!(r.window_size_ms(&cfg(), 12_345), 10_000);
}

#[test]
fn idle_gaps_count_as_time() {
    // 1000 at t=0 and 1000 at t=5000: the oldest window starts at 0, elapsed 5000 = 5 full
    // windows < 10, so 5000 + 5 × 1000 = 10 000 ms; rate 2000 / 10 = 200/s.
    let mut r = SampledRate::new();
    r.record(&cfg(), 1000.0, 0);
    r.record(&cfg(), 1000.0, 5000);
    assert_eq!(r.window_size_ms(&cfg(), 5000), 10_000);
    assert_eq!(r.measure(&cfg(), 5000), 200.0);
}

#[test]
fn steady_traffic_measures_its_rate() {
    // 100 bytes every 100 ms (1000/s) for 20 s, t = 0, 100, ..., 19 900. Measured at 20 000:
    // the window started at 8000 last saw an event at 8900, and 20 000 − 8900 ≥ 11 000 expires
    // it; the windows from 9000 to 19 000 (11 of them, 1000 bytes each) remain, spanning
    // 20 000 − 9000 = 11 000 ms (11 full windows ≥ 10): 11 000 / 11 = 1000/s.
    let mut r = SampledRate::new();
    for i in 0..200 {
        r.record(&cfg(), 100.0, i * 100);
    }
    assert_eq!(r.window_size_ms(&cfg(), 20_000), 11_000);
    assert_eq!(r.measure(&cfg(), 20_000), 1000.0);
}

#[test]
fn one_record_per_window_spans_ten_windows() {
    // 2000 at each whole second, t = 0..=20 000. At 20 000 the ring (12 slots) holds windows
    // 9000..=20 000; the one at 9000 is 11 000 ms idle and expires, leaving 11 windows
    // (22 000 bytes) from 10 000: elapsed 10 000 = 10 full windows, so 22 000 / 10 = 2200/s.
    let mut r = SampledRate::new();
    for s in 0..=20 {
        r.record(&cfg(), 2000.0, s * 1000);
    }
    assert_eq!(r.window_size_ms(&cfg(), 20_000), 10_000);
    assert_eq!(r.measure(&cfg(), 20_000), 2200.0);
}

#[test]
fn windows_expire_after_samples_times_window() {
    // A window counts until samples × window = 11 000 ms after its last event.
    let mut r = SampledRate::new();
    r.record(&cfg(), 5000.0, 0);
    // At 10 999: elapsed 10 999 (10 full windows), 5000 / 10.999.
    assert_eq!(r.peek(&cfg(), 10_999), 5000.0 / 10.999);
    assert_eq!(r.measure(&cfg(), 11_000), 0.0);
    // And the sensor then behaves like a new one.
    r.record(&cfg(), 1000.0, 11_000);
    assert_eq!(r.measure(&cfg(), 11_000), 100.0);
}

#[test]
fn a_negative_record_takes_usage_back() {
    let mut r = SampledRate::new();
    r.record(&cfg(), 3000.0, 0);
    r.record(&cfg(), -3000.0, 10);
    assert_eq!(r.measure(&cfg(), 10), 0.0);
}

#[test]
fn other_window_settings() {
    // 2 windows of 500 ms: at least 1 full window is assumed. 400 at t=0, measured at 100:
    // elapsed 100 (0 full) + 500 = 600 ms; 400 / 0.6 s.
    let c = RateConfig::new(2, 500).unwrap();
    let mut r = SampledRate::new();
    r.record(&c, 400.0, 0);
    assert_eq!(r.window_size_ms(&c, 100), 600);
    assert_eq!(r.measure(&c, 100), 400.0 / 0.6);
    // One window: no full window assumed, at least 1 ms.
    let one = RateConfig::new(1, 1000).unwrap();
    let mut r = SampledRate::new();
    r.record(&one, 5.0, 0);
    assert_eq!(r.window_size_ms(&one, 0), 1);
    assert_eq!(r.measure(&one, 0), 5000.0);
}

#[test]
fn a_clock_that_goes_back_does_not_panic() {
    let mut r = SampledRate::new();
    r.record(&cfg(), 100.0, 10_000);
    r.record(&cfg(), 100.0, 5_000);
    let rate = r.measure(&cfg(), 4_000);
    assert!(rate.is_finite() && rate > 0.0);
    assert!(r.window_size_ms(&cfg(), i64::MIN) >= 1);
}

#[test]
fn peek_agrees_with_measure() {
    // A deterministic pseudo-random walk of records and measurements: peek (for metrics) must
    // give what measure (for quotas) gives, and leave the state so that both paths stay equal.
    let c = RateConfig::new(4, 250).unwrap();
    let mut measured = SampledRate::new();
    let mut peeked = SampledRate::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut now = 0i64;
    for _ in 0..5_000 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        now += (seed >> 33) as i64 % 700;
        let value = ((seed >> 20) % 1000) as f64;
        measured.record(&c, value, now);
        peeked.record(&c, value, now);
        let p = peeked.peek(&c, now);
        assert_eq!(p, measured.peek(&c, now));
        assert_eq!(p, measured.measure(&c, now));
    }
}
