//! How long a client that exceeded its quota is held back, and the broker-side helper for
//! KIP-219's way of holding it back.
//!
//! **Throttle time** (Kafka's `QuotaUtils.throttleTime`): with observed rate `O`, quota `T` and
//! the span `W` the rate was measured over, the delay `X` that brings the rate back to the quota
//! if nothing more is recorded solves `O·W / (W + X) = T`, so `X = (O − T) / T × W`, rounded to
//! the nearest millisecond. Request-time quotas cap `X` at one window
//! (`quota.window.size.seconds`), as Kafka's `ClientRequestQuotaManager` does
//! (`QuotaUtils.boundedThrottleTime`); byte-rate quotas are not capped by Kafka, and here only
//! by [`MAX_THROTTLE_TIME_MS`] so the value fits the wire's `throttle_time_ms` (int32).
//!
//! **KIP-219**: the broker answers a throttled request at once, with `throttle_time_ms` set in
//! the response (clients from Kafka 2.0 on then wait that long themselves), and stops reading
//! from that connection until the time has passed, so that older clients are held back as well.
//! [`ChannelThrottle`] keeps the "do not read before" instant for one connection.

/// Kafka's conversion of request-handler time into a `request_percentage` usage: one second of
/// one thread's time is 100 (percent-seconds), so nanoseconds × 100 / 10⁹.
pub const NANOS_TO_PERCENTAGE_PER_SECOND: f64 = 100.0 / 1_000_000_000.0;

/// The largest throttle time returned: `throttle_time_ms` is an int32 on the wire.
pub const MAX_THROTTLE_TIME_MS: u64 = i32::MAX as u64;

/// Thread time in nanoseconds as the value to record for a `request_percentage` quota.
pub fn nanos_to_percentage(nanos: u64) -> f64 {
    nanos as f64 * NANOS_TO_PERCENTAGE_PER_SECOND
}

/// Kafka's throttle time: `round((observed − bound) / bound × window_ms)`, or 0 when the
/// observed rate is within the bound. Capped at [`MAX_THROTTLE_TIME_MS`].
pub fn throttle_time_ms(observed_rate: f64, bound: f64, window_ms: i64) -> u64 {
    if observed_rate.is_nan() || bound.is_nan() || observed_rate <= bound {
        return 0;
    }
    let ms = (observed_rate - bound) / bound * window_ms as f64;
    if !ms.is_finite() || ms >= MAX_THROTTLE_TIME_MS as f64 {
        return MAX_THROTTLE_TIME_MS;
    }
    // `ms` is positive here; `round` is half away from zero, like Java's Math.round for it.
    ms.round().max(0.0) as u64
}

/// [`throttle_time_ms`] capped at `max_ms` (Kafka's `QuotaUtils.boundedThrottleTime`).
pub fn bounded_throttle_time_ms(
    observed_rate: f64,
    bound: f64,
    window_ms: i64,
    max_ms: u64,
) -> u64 {
    throttle_time_ms(observed_rate, bound, window_ms).min(max_ms)
}

/// The KIP-219 mute of one connection: after a response that carried a `throttle_time_ms`, the
/// broker reads no further request from that connection until [`ChannelThrottle::unmute_at_ms`].
/// Several throttled responses in flight extend the mute to the latest end; they do not add up.
/// Time is milliseconds on the same clock as the `now_ms` passed to the quota manager.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelThrottle {
    muted_until_ms: Option<i64>,
}

impl ChannelThrottle {
    /// A connection that is not throttled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Mutes the connection for `throttle_ms` from `now_ms` (a no-op for 0, and never shortens
    /// a mute already in force).
    pub fn throttle(&mut self, now_ms: i64, throttle_ms: u64) {
        if throttle_ms == 0 {
            return;
        }
        let until = now_ms.saturating_add(i64::try_from(throttle_ms).unwrap_or(i64::MAX));
        self.muted_until_ms = Some(self.muted_until_ms.map_or(until, |u| u.max(until)));
    }

    /// Whether the connection must not be read at `now_ms`.
    pub fn is_muted(&self, now_ms: i64) -> bool {
        self.muted_until_ms.is_some_and(|u| now_ms < u)
    }

    /// How long, from `now_ms`, until the connection may be read again (0 when not muted).
    pub fn remaining_ms(&self, now_ms: i64) -> u64 {
        self.muted_until_ms
            .map_or(0, |u| u64::try_from(u.saturating_sub(now_ms)).unwrap_or(0))
    }

    /// The instant the mute ends, if one was ever set (it may lie in the past).
    pub fn unmute_at_ms(&self) -> Option<i64> {
        self.muted_until_ms
    }
}

#[cfg(test)]
#[path = "throttle_test.rs"]
mod tests;
