//! [`TokenBucket`]: Kafka's measurable for `controller_mutation_rate` (KIP-599), where a burst of
//! topic or partition creations may be accepted at once and is paid back over time.
//!
//! The bucket holds at most `burst = samples × window seconds × quota` tokens and gains `quota`
//! tokens per second. Each mutation (one partition created or deleted) takes a token; the count
//! may go below zero. A quota is exceeded while the count is negative, and the time to climb
//! back to zero, `−tokens / quota × 1000` ms, is the throttle time.
//!
//! A new bucket starts full, which is what Kafka's bucket does in practice (it starts empty at
//! time 0 and the first refill, at a wall-clock time far from 0, fills it).

use crate::rate::RateConfig;

/// A token bucket refilled at the quota's rate. The quota is passed to each call, so a changed
/// quota takes effect at once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenBucket {
    /// `None` until first used; then the tokens as of `last_update_ms`.
    tokens: Option<f64>,
    last_update_ms: i64,
}

impl TokenBucket {
    /// A bucket that will start full.
    pub fn new() -> Self {
        Self::default()
    }

    /// The largest number of tokens the bucket holds for `quota`.
    pub fn burst(config: &RateConfig, quota: f64) -> f64 {
        f64::from(config.samples()) * (config.window_ms() as f64 / 1000.0) * quota
    }

    /// Takes `value` tokens at `now_ms` (after refilling); the count may go negative.
    pub fn record(&mut self, config: &RateConfig, quota: f64, value: f64, now_ms: i64) {
        let burst = Self::burst(config, quota);
        let tokens = self.refill(quota, burst, now_ms);
        self.tokens = Some((tokens - value).min(burst));
    }

    /// The tokens left at `now_ms` (after refilling); negative while the quota is exceeded.
    pub fn measure(&mut self, config: &RateConfig, quota: f64, now_ms: i64) -> f64 {
        let burst = Self::burst(config, quota);
        self.refill(quota, burst, now_ms)
    }

    /// The tokens [`TokenBucket::measure`] would return, without changing anything.
    pub fn peek(&self, config: &RateConfig, quota: f64, now_ms: i64) -> f64 {
        let burst = Self::burst(config, quota);
        self.refilled(quota, burst, now_ms)
    }

    fn refilled(&self, quota: f64, burst: f64, now_ms: i64) -> f64 {
        match self.tokens {
            None => burst,
            Some(t) => {
                let elapsed_s = now_ms.saturating_sub(self.last_update_ms) as f64 / 1000.0;
                (t + quota * elapsed_s).min(burst)
            }
        }
    }

    fn refill(&mut self, quota: f64, burst: f64, now_ms: i64) -> f64 {
        let tokens = self.refilled(quota, burst, now_ms);
        self.tokens = Some(tokens);
        self.last_update_ms = now_ms;
        tokens
    }
}

/// Kafka's throttle time for a token bucket: the time for `tokens` (negative) to climb back to
/// zero at `quota` tokens per second, `round(−tokens / quota × 1000)`; 0 when not negative.
/// Capped at [`crate::throttle::MAX_THROTTLE_TIME_MS`].
pub fn token_bucket_throttle_ms(tokens: f64, quota: f64) -> u64 {
    if tokens.is_nan() || tokens >= 0.0 {
        return 0;
    }
    let ms = -tokens / quota * 1000.0;
    if !ms.is_finite() || ms >= crate::throttle::MAX_THROTTLE_TIME_MS as f64 {
        return crate::throttle::MAX_THROTTLE_TIME_MS;
    }
    ms.round().max(0.0) as u64
}

#[cfg(test)]
#[path = "token_bucket_test.rs"]
mod tests;
