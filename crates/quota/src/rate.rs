//! [`SampledRate`]: Kafka's `Rate` over a `WindowedSum` (the measurable behind every client
//! quota), so that ferry throttles at the same moments and by the same amounts as Kafka does.
//!
//! Usage is summed into at most `samples + 1` windows of `window_ms` each (Kafka keeps one extra
//! window for the sample that overlaps the start of the monitored period). The rate is the sum
//! of the windows still alive divided by the time they span, where:
//! - a window expires once no event has been recorded in it for `samples × window_ms`;
//! - **the elapsed time is never taken as less than `samples − 1` full windows**: a sensor that
//!   has seen one burst in its first millisecond measures that burst over ten seconds (with the
//!   defaults), not over one millisecond, so a new client is not throttled for its first request;
//! - the elapsed time is at least 1 ms, so the rate is always defined.
//!
//! Time is an argument (`now_ms`, milliseconds on any clock that does not jump); nothing here
//! reads a clock. A `now_ms` earlier than the previous one is tolerated (nothing panics) but
//! measures as if no time had passed since the window started.

use crate::error::QuotaError;

/// `quota.window.num` and `quota.window.size.seconds`: how many windows a rate spans and how
/// long each is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateConfig {
    samples: u32,
    window_ms: i64,
}

impl Default for RateConfig {
    /// Kafka's defaults: 11 windows of 1 s.
    fn default() -> Self {
        Self {
            samples: DEFAULT_QUOTA_WINDOW_NUM,
            window_ms: DEFAULT_QUOTA_WINDOW_SIZE_SECONDS as i64 * 1000,
        }
    }
}

/// Kafka's default `quota.window.num`.
pub const DEFAULT_QUOTA_WINDOW_NUM: u32 = 11;
/// Kafka's default `quota.window.size.seconds`.
pub const DEFAULT_QUOTA_WINDOW_SIZE_SECONDS: u32 = 1;

impl RateConfig {
    /// `samples` windows of `window_ms` each; both must be at least 1.
    pub fn new(samples: u32, window_ms: i64) -> Result<Self, QuotaError> {
        if samples == 0 || window_ms < 1 {
            return Err(QuotaError::InvalidWindow { samples, window_ms });
        }
        Ok(Self { samples, window_ms })
    }

    /// From the broker configs `quota.window.num` and `quota.window.size.seconds`.
    pub fn from_broker_config(
        quota_window_num: u32,
        quota_window_size_seconds: u32,
    ) -> Result<Self, QuotaError> {
        Self::new(
            quota_window_num,
            i64::from(quota_window_size_seconds) * 1000,
        )
    }

    /// The number of windows (`quota.window.num`).
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// The length of one window in milliseconds.
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Idle time after which a window's contents no longer count: `samples × window_ms`.
    fn expire_age_ms(&self) -> i64 {
        i64::from(self.samples).saturating_mul(self.window_ms)
    }
}

/// One window of a [`SampledRate`] (Kafka's `SampledStat.Sample`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    value: f64,
    start_ms: i64,
    last_event_ms: i64,
}

impl Sample {
    fn new(now_ms: i64) -> Self {
        Self {
            value: 0.0,
            start_ms: now_ms,
            last_event_ms: now_ms,
        }
    }

    /// Whether nothing recorded in this window still counts at `now_ms`.
    fn is_obsolete(&self, config: &RateConfig, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_event_ms) >= config.expire_age_ms()
    }
}

/// A rate per second of whatever is recorded (bytes, percent-seconds of thread time), measured
/// as Kafka's `Rate` measures it. The same [`RateConfig`] must be passed to every call.
#[derive(Debug, Clone, Default)]
pub struct SampledRate {
    samples: Vec<Sample>,
    current: usize,
}

impl SampledRate {
    /// A rate with nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value` at `now_ms`, starting a new window when the current one is `window_ms` old.
    /// A negative value takes back something recorded earlier.
    pub fn record(&mut self, config: &RateConfig, value: f64, now_ms: i64) {
        if self.samples.is_empty() {
            self.samples.push(Sample::new(now_ms));
            self.current = 0;
        }
        let complete = self
            .samples
            .get(self.current)
            .is_none_or(|s| now_ms.saturating_sub(s.start_ms) >= config.window_ms);
        if complete {
            self.advance(config, now_ms);
        }
        if let Some(s) = self.samples.get_mut(self.current) {
            s.value += value;
            s.last_event_ms = now_ms;
        }
    }

    /// Moves to the next window slot, reusing the oldest once `samples + 1` exist.
    fn advance(&mut self, config: &RateConfig, now_ms: i64) {
        let slots = config.samples as usize + 1;
        self.current = (self.current + 1) % slots;
        match self.samples.get_mut(self.current) {
            Some(s) => *s = Sample::new(now_ms),
            None => {
                self.samples.push(Sample::new(now_ms));
                self.current = self.samples.len() - 1;
            }
        }
    }

    /// Clears the windows whose contents no longer count, as Kafka does before every
    /// measurement, so that a later [`SampledRate::record`] sees the same state as in Kafka.
    fn purge(&mut self, config: &RateConfig, now_ms: i64) {
        for s in &mut self.samples {
            if s.is_obsolete(config, now_ms) {
                *s = Sample::new(now_ms);
            }
        }
    }

    /// The rate per second at `now_ms` (Kafka's `Rate.measure`); clears expired windows.
    pub fn measure(&mut self, config: &RateConfig, now_ms: i64) -> f64 {
        self.purge(config, now_ms);
        self.peek(config, now_ms)
    }

    /// The span in milliseconds the rate is computed over at `now_ms` (Kafka's
    /// `Rate.windowSize`); clears expired windows.
    pub fn window_size_ms(&mut self, config: &RateConfig, now_ms: i64) -> i64 {
        self.purge(config, now_ms);
        self.peek_window_size_ms(config, now_ms)
    }

    /// The rate [`SampledRate::measure`] would return at `now_ms`, without changing anything:
    /// for metrics, which must not disturb the windows.
    pub fn peek(&self, config: &RateConfig, now_ms: i64) -> f64 {
        let total: f64 = self
            .samples
            .iter()
            .filter(|s| !s.is_obsolete(config, now_ms))
            .fold(0.0, |sum, s| sum + s.value);
        // Window sizes are whole milliseconds; the rate is per second.
        total / (self.peek_window_size_ms(config, now_ms) as f64 / 1000.0)
    }

    /// The span [`SampledRate::window_size_ms`] would return at `now_ms`, without changing
    /// anything. An expired window counts as starting at `now_ms`, which is what clearing it
    /// would do.
    pub fn peek_window_size_ms(&self, config: &RateConfig, now_ms: i64) -> i64 {
        let oldest_start = self
            .samples
            .iter()
            .map(|s| {
                if s.is_obsolete(config, now_ms) {
                    now_ms
                } else {
                    s.start_ms
                }
            })
            .min()
            .unwrap_or(now_ms);
        let mut elapsed = now_ms.saturating_sub(oldest_start);
        let full_windows = elapsed / config.window_ms;
        let min_full_windows = i64::from(config.samples) - 1;
        if full_windows < min_full_windows {
            elapsed = elapsed
                .saturating_add((min_full_windows - full_windows).saturating_mul(config.window_ms));
        }
        elapsed.max(1)
    }
}

#[cfg(test)]
#[path = "rate_test.rs"]
mod tests;
