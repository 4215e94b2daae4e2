//! The estimated cost of the WAL path: S3 Express One Zone request and transfer prices and
//! cross-AZ transfer, applied to how the broker's counters moved (the
//! `ferry_remote_wal_estimated_cost_micro_usd_per_hour` gauges).

/// Prices for the estimated cost gauge (USD).
#[derive(Debug, Clone, PartialEq)]
pub struct CostTable {
    pub put_per_1000: f64,
    pub get_per_1000: f64,
    pub upload_per_gb: f64,
    pub retrieval_per_gb: f64,
    pub cross_az_per_gb: f64,
}

/// Counters the cost estimate is computed from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub puts: u64,
    pub gets: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub cross_az_bytes: u64,
}

/// USD per hour (requests, transfer) for the counters' change over `elapsed_ms`.
pub fn cost_per_hour(prices: &CostTable, delta: Totals, elapsed_ms: i64) -> (f64, f64) {
    if elapsed_ms <= 0 {
        return (0.0, 0.0);
    }
    let per_hour = 3_600_000.0 / elapsed_ms as f64;
    let gb = 1e9;
    let requests = delta.puts as f64 / 1000.0 * prices.put_per_1000
        + delta.gets as f64 / 1000.0 * prices.get_per_1000;
    let transfer = delta.bytes_up as f64 / gb * prices.upload_per_gb
        + delta.bytes_down as f64 / gb * prices.retrieval_per_gb
        + delta.cross_az_bytes as f64 / gb * prices.cross_az_per_gb;
    (requests * per_hour, transfer * per_hour)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> CostTable {
        CostTable {
            put_per_1000: 0.00113,
            get_per_1000: 0.00003,
            upload_per_gb: 0.0032,
            retrieval_per_gb: 0.0006,
            cross_az_per_gb: 0.01,
        }
    }

    #[test]
    fn cost_scales_to_an_hour() {
        // 100 PUTs/s and 1 GB cross-AZ in one second.
        let d = Totals {
            puts: 100,
            cross_az_bytes: 1_000_000_000,
            ..Totals::default()
        };
        let (req, xfer) = cost_per_hour(&prices(), d, 1000);
        assert!(
            (req - 100.0 * 3600.0 * 0.00113 / 1000.0).abs() < 1e-9,
            "{req}"
        );
        assert!((xfer - 0.01 * 3600.0).abs() < 1e-9, "{xfer}");
        assert_eq!(cost_per_hour(&prices(), d, 0), (0.0, 0.0));
    }
}
