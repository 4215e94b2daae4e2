//! A budget for log lines that clients can cause. A client sending a stream of malformed
//! frames must not be able to fill the disk with warnings: each kind of warning may be logged
//! a few times per interval, and the next line allowed says how many were left out.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Lets through at most `per_interval` events per `interval`, counting the rest.
#[derive(Debug)]
pub struct LogBudget {
    per_interval: u32,
    interval: Duration,
    state: Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Start of the current interval (`None` before the first event).
    since: Option<Instant>,
    /// Events let through in the current interval.
    admitted: u32,
    /// Events refused since the last one let through.
    suppressed: u64,
}

impl LogBudget {
    pub const fn new(per_interval: u32, interval: Duration) -> Self {
        Self {
            per_interval,
            interval,
            state: Mutex::new(BudgetState {
                since: None,
                admitted: 0,
                suppressed: 0,
            }),
        }
    }

    /// `Some(left_out)` when this event may be logged at `now`, with the number of events left
    /// out since the last logged one; `None` when it must not be logged.
    pub fn admit(&self, now: Instant) -> Option<u64> {
        // A poisoned lock only means another thread panicked while counting: keep counting.
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let expired = s
            .since
            .is_none_or(|since| now.saturating_duration_since(since) >= self.interval);
        if expired {
            s.since = Some(now);
            s.admitted = 0;
        }
        if s.admitted < self.per_interval {
            s.admitted += 1;
            Some(std::mem::take(&mut s.suppressed))
        } else {
            s.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_a_few_through_per_interval_and_counts_the_rest() {
        let budget = LogBudget::new(3, Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(budget.admit(t0), Some(0));
        assert_eq!(budget.admit(t0), Some(0));
        assert_eq!(budget.admit(t0 + Duration::from_secs(1)), Some(0));
        for i in 0..1000 {
            assert_eq!(budget.admit(t0 + Duration::from_millis(1000 + i)), None);
        }
        // A new interval: the first line says how many were left out.
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(budget.admit(t1), Some(1000));
        assert_eq!(budget.admit(t1), Some(0));
    }
}
