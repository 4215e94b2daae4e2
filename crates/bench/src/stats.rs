//! Latency histogram (nanoseconds, 3 significant digits) and number formatting.

use anyhow::{Context as _, Result};
use hdrhistogram::Histogram;

/// Largest latency recorded exactly; larger values are clamped to it.
const MAX_NANOS: u64 = 600_000_000_000;

pub struct LatencyHistogram {
    h: Histogram<u64>,
}

impl LatencyHistogram {
    pub fn new() -> Result<Self> {
        let h = Histogram::new_with_bounds(1_000, MAX_NANOS, 3).context("creating histogram")?;
        Ok(Self { h })
    }

    /// Records one latency in nanoseconds.
    pub fn record(&mut self, nanos: u64) {
        self.h.saturating_record(nanos.clamp(1_000, MAX_NANOS));
    }

    pub fn len(&self) -> u64 {
        self.h.len()
    }

    /// The latency at quantile `q` (0..=1) in nanoseconds; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.h.is_empty() {
            0
        } else {
            self.h.value_at_quantile(q)
        }
    }

    pub fn max(&self) -> u64 {
        if self.h.is_empty() {
            0
        } else {
            self.h.max()
        }
    }
}

/// Nanoseconds as milliseconds with two decimals.
pub fn fmt_ms(nanos: u64) -> String {
    format!("{:.2}", nanos as f64 / 1e6)
}

/// Bytes as (decimal) megabytes.
pub fn mb(bytes: f64) -> f64 {
    bytes / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::new().unwrap();
        assert_eq!(h.quantile(0.5), 0);
        assert_eq!(h.max(), 0);
        for ms in 1..=100u64 {
            h.record(ms * 1_000_000);
        }
        assert_eq!(h.len(), 100);
        let p50 = h.quantile(0.50) as f64 / 1e6;
        let p99 = h.quantile(0.99) as f64 / 1e6;
        assert!((p50 - 50.0).abs() < 0.1, "p50 {p50}");
        assert!((p99 - 99.0).abs() < 0.1, "p99 {p99}");
        assert!((h.max() as f64 / 1e6 - 100.0).abs() < 0.1);
    }

    #[test]
    fn clamps_out_of_range_values() {
        let mut h = LatencyHistogram::new().unwrap();
        h.record(0);
        h.record(u64::MAX);
        assert_eq!(h.len(), 2);
        assert!(h.max() >= MAX_NANOS);
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_ms(3_104_000), "3.10");
        assert_eq!(fmt_ms(0), "0.00");
        assert_eq!(mb(3_200_000_000.0), 3200.0);
    }
}
