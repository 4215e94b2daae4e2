//! A failure that repeats while its cause lasts (a bucket that is down fails every upload, at
//! the upload interval; a dead broker fails every metadata publish to the partitions it led,
//! between publishes to the others that succeed) is logged when it starts, then at most once per
//! [`FailureLog::EVERY`] with the number of failures not logged since, and its end once: an
//! operator sees the outage and its length, not thousands of identical lines.
//!
//! A run of failures ends at the first success that comes [`FailureLog::EVERY`] after its last
//! failure, not at any success: requests to a store or broker that is half down succeed and fail
//! in turn, and that is still one outage.
//!
//! The caller keeps its own message for a failure: [`FailureLog::failed`] only says whether
//! this failure is one to log. The end of a run is logged here ([`FailureLog::success`]), the
//! same line for every kind.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The state of one kind of failure (one per call site and component).
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    failing: Mutex<Option<Failing>>,
}

/// A run of failures not yet ended by a success.
#[derive(Debug, Clone, Copy)]
struct Failing {
    since: Instant,
    last_failure: Instant,
    last_logged: Instant,
    not_logged: u64,
    total: u64,
}

/// A run of failures that a success ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Recovered {
    pub failures: u64,
    pub lasted: Duration,
}

impl FailureLog {
    /// At most one line per this while failures go on; and how long after its last failure a
    /// success ends the run.
    pub(crate) const EVERY: Duration = Duration::from_secs(10);

    /// Counts a failure. `Some(n)` when it is to be logged, `n` being the failures since the
    /// last line that were not (0 for the first of a run).
    pub(crate) fn failed(&self) -> Option<u64> {
        let now = Instant::now();
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        match failing.as_mut() {
            None => {
                *failing = Some(Failing {
                    since: now,
                    last_failure: now,
                    last_logged: now,
                    not_logged: 0,
                    total: 1,
                });
                Some(0)
            }
            Some(f) => {
                f.total += 1;
                f.last_failure = now;
                if now.duration_since(f.last_logged) < Self::EVERY {
                    f.not_logged += 1;
                    return None;
                }
                f.last_logged = now;
                Some(std::mem::take(&mut f.not_logged))
            }
        }
    }

    /// Counts a success: `Some` when it ends a run of failures (none for [`Self::EVERY`]), to
    /// be logged once; `lasted` is from the run's first failure to its last.
    fn succeeded(&self) -> Option<Recovered> {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        // Most successes end no run: the clock is read only when there is one.
        let f = (*failing)?;
        if Instant::now().duration_since(f.last_failure) < Self::EVERY {
            return None;
        }
        *failing = None;
        Some(Recovered {
            failures: f.total,
            lasted: f.last_failure.duration_since(f.since),
        })
    }

    /// Counts a success of `what` (a plural: "remote WAL uploads"), logging "`what` succeed
    /// again" with the run's failures and length when it ends one.
    pub(crate) fn success(&self, what: &str) {
        if let Some(r) = self.succeeded() {
            tracing::info!(
                failures = r.failures,
                seconds = r.lasted.as_secs_f64(),
                "{what} succeed again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_run_of_failures_is_logged_at_its_start_every_interval_and_at_its_end() {
        let log = FailureLog::default();
        assert_eq!(log.succeeded(), None, "no run to end");
        assert_eq!(log.failed(), Some(0), "the first failure is logged");
        for _ in 0..99 {
            assert_eq!(log.failed(), None, "the next ones are counted");
            // Successes in between (a half-down store) do not end the run.
            assert_eq!(log.succeeded(), None);
        }
        tokio::time::advance(FailureLog::EVERY).await;
        assert_eq!(log.failed(), Some(99), "one line with the count held back");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(log.failed(), None);
        tokio::time::advance(FailureLog::EVERY - Duration::from_millis(1)).await;
        assert_eq!(log.succeeded(), None, "too soon after the last failure");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            log.succeeded(),
            Some(Recovered {
                failures: 102,
                lasted: FailureLog::EVERY + Duration::from_secs(1),
            })
        );
        assert_eq!(log.succeeded(), None, "the end is logged once");
        assert_eq!(log.failed(), Some(0), "a new run starts afresh");
    }
}
