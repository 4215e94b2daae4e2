//! [`RetryingStore`]: retries retriable failures ([`ObjStoreError::is_retriable`]) with
//! exponential backoff and jitter, and bounds every operation by an overall deadline.
//!
//! It sits at the top of the stack, above [`crate::MeteredStore`] (see the crate docs), so each
//! attempt it makes is metered as one request.
//!
//! # Which calls are safe to retry
//!
//! Reads, `put` (an overwrite with the same bytes), `delete` (idempotent) and `list` are retried
//! as they are. `put_if_absent` needs care: if an attempt failed *ambiguously* (timeout, lost
//! connection) the write may have landed, and the retry then sees `AlreadyExists` for our own
//! object. So after an ambiguous failure an `AlreadyExists` answer is checked by reading the
//! object back: if it holds exactly our bytes the call reports [`PutOutcome::Created`] (the
//! caller's bytes are stored under the key, which is what `Created` promises; a second writer
//! with byte-identical data is indistinguishable and harmless). WAL keys are unique per upload
//! (see [`crate::keys`]), so identical bytes from a different writer do not arise there.
//!
//! # Backoff
//!
//! Attempt `n` (from 1) that fails waits `min(retry_backoff * 2^(n-1), retry_backoff_max)`
//! scaled by a random factor in `[1 - jitter, 1 + jitter]` (Kafka's client uses ±20%), then tries
//! again, unless `max_attempts` is reached or the wait would pass the operation deadline. The
//! jitter RNG is seeded, so runs are repeatable given [`RetryConfig::jitter_seed`]; sleeps use
//! tokio's clock, so tests run them instantly under `tokio::time::pause`.

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{ObjStoreError, ObjectBody, ObjectMeta, ObjectStore, Op, PutOutcome, Result};

/// Retry policy. The Kafka-style names in brackets are the `remote.wal.*` configuration keys the
/// broker maps onto these fields.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// Attempts per operation including the first (`store.retries` + 1). At least 1.
    pub max_attempts: u32,
    /// First backoff after a failed attempt (`retry.backoff.ms`).
    pub retry_backoff: Duration,
    /// Upper bound of the exponential backoff (`retry.backoff.max.ms`).
    pub retry_backoff_max: Duration,
    /// Relative jitter applied to each backoff, `0.0..=1.0` (Kafka uses 0.2).
    pub jitter: f64,
    /// Time limit of one attempt (`request.timeout.ms`); `None` leaves it to the backend.
    pub request_timeout: Option<Duration>,
    /// Time limit of the whole operation, all attempts and backoffs included
    /// (`delivery.timeout.ms`, per operation). On expiry the operation fails with `Timeout`.
    pub operation_timeout: Duration,
    /// Seed of the jitter RNG; `None` seeds from the operating system (brokers then decorrelate
    /// their retries); tests pass a fixed seed.
    pub jitter_seed: Option<u64>,
}

impl Default for RetryConfig {
    /// Tuned for the remote WAL's small, latency-sensitive requests.
    fn default() -> Self {
        Self {
            max_attempts: 5,
            retry_backoff: Duration::from_millis(20),
            retry_backoff_max: Duration::from_secs(1),
            jitter: 0.2,
            request_timeout: Some(Duration::from_secs(5)),
            operation_timeout: Duration::from_secs(30),
            jitter_seed: None,
        }
    }
}

impl RetryConfig {
    /// The backoff before attempt `failed_attempts + 1`, before jitter.
    pub fn base_backoff(&self, failed_attempts: u32) -> Duration {
        let exp = failed_attempts.saturating_sub(1).min(30);
        self.retry_backoff
            .saturating_mul(1u32 << exp)
            .min(self.retry_backoff_max)
    }
}

/// Wraps `S` with retries and deadlines (see the module docs).
pub struct RetryingStore<S> {
    inner: S,
    config: RetryConfig,
    rng: Mutex<StdRng>,
}

impl<S: fmt::Debug> fmt::Debug for RetryingStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryingStore")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S: ObjectStore> RetryingStore<S> {
    pub fn new(inner: S, config: RetryConfig) -> Self {
        let rng = match config.jitter_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            // Jitter exists to spread the retries of many brokers apart, so in production
            // each process draws its own; tests pass `jitter_seed` to repeat a run.
            #[allow(clippy::disallowed_methods)]
            None => StdRng::from_os_rng(),
        };
        Self {
            inner,
            config,
            rng: Mutex::new(rng),
        }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    pub fn config(&self) -> &RetryConfig {
        &self.config
    }

    fn backoff(&self, failed_attempts: u32) -> Duration {
        let base = self.config.base_backoff(failed_attempts);
        let jitter = self.config.jitter.clamp(0.0, 1.0);
        if jitter == 0.0 {
            return base;
        }
        let factor = {
            let mut rng = self
                .rng
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            rng.random_range(1.0 - jitter..=1.0 + jitter)
        };
        base.mul_f64(factor)
    }

    /// Runs `attempt` until it succeeds, fails for good, or runs out of attempts or time.
    /// `saw_ambiguous` is set when some failed attempt may have been applied.
    async fn retry<T, F, Fut>(
        &self,
        op: Op,
        key: &str,
        saw_ambiguous: &mut bool,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.config.operation_timeout;
        let max_attempts = self.config.max_attempts.max(1);
        let mut failed = 0u32;
        loop {
            let result = match self.config.request_timeout {
                Some(limit) => {
                    let limit =
                        limit.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                    match tokio::time::timeout(limit, attempt()).await {
                        Ok(result) => result,
                        Err(_) => Err(ObjStoreError::Timeout {
                            op: op.as_str(),
                            message: format!("{key}: attempt exceeded {limit:?}"),
                        }),
                    }
                }
                None => match tokio::time::timeout_at(deadline, attempt()).await {
                    Ok(result) => result,
                    Err(_) => Err(self.deadline_error(op, key, failed + 1)),
                },
            };
            let err = match result {
                Ok(value) => return Ok(value),
                Err(err) if !err.is_retriable() => return Err(err),
                Err(err) => err,
            };
            failed += 1;
            *saw_ambiguous |= op.is_write() && err.is_ambiguous();
            if failed >= max_attempts {
                tracing::warn!(%op, key, attempts = failed, error = %err, "object store: giving up");
                return Err(err);
            }
            let wait = self.backoff(failed);
            let now = tokio::time::Instant::now();
            if now + wait >= deadline {
                tracing::warn!(%op, key, attempts = failed, error = %err, "object store: out of time");
                return Err(self.deadline_error(op, key, failed));
            }
            tracing::debug!(%op, key, attempt = failed, error = %err, ?wait, "object store: retrying");
            tokio::time::sleep(wait).await;
        }
    }

    fn deadline_error(&self, op: Op, key: &str, attempts: u32) -> ObjStoreError {
        ObjStoreError::Timeout {
            op: op.as_str(),
            message: format!(
                "{key}: operation timeout {:?} reached after {attempts} attempt(s)",
                self.config.operation_timeout
            ),
        }
    }

    async fn simple<T, F, Fut>(&self, op: Op, key: &str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut ambiguous = false;
        self.retry(op, key, &mut ambiguous, attempt).await
    }
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for RetryingStore<S> {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.simple(Op::Put, key, || self.inner.put(key, data.clone()))
            .await
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
        self.put_body_if_absent(key, ObjectBody::from_bytes(data))
            .await
    }

    async fn put_file(&self, key: &str, path: &Path, len: u64) -> Result<()> {
        self.simple(Op::Put, key, || self.inner.put_file(key, path, len))
            .await
    }

    async fn put_body_if_absent(&self, key: &str, body: ObjectBody) -> Result<PutOutcome> {
        let mut ambiguous = false;
        let outcome = self
            .retry(Op::PutIfAbsent, key, &mut ambiguous, || {
                self.inner.put_body_if_absent(key, body.clone())
            })
            .await?;
        if outcome == PutOutcome::AlreadyExists && ambiguous {
            // An earlier attempt may have created it: is the stored object ours?
            let stored = self.simple(Op::Get, key, || self.inner.get(key)).await?;
            if stored == body.to_bytes() {
                tracing::debug!(
                    key,
                    "put_if_absent: object from an ambiguous earlier attempt"
                );
                return Ok(PutOutcome::Created);
            }
        }
        Ok(outcome)
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        self.simple(Op::Get, key, || self.inner.get(key)).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.simple(Op::GetRange, key, || {
            self.inner.get_range(key, range.clone())
        })
        .await
    }

    async fn get_range_pieces(&self, key: &str, range: Range<u64>) -> Result<Vec<Bytes>> {
        self.simple(Op::GetRange, key, || {
            self.inner.get_range_pieces(key, range.clone())
        })
        .await
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        self.simple(Op::Head, key, || self.inner.head(key)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.simple(Op::List, prefix, || self.inner.list(prefix))
            .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.simple(Op::Delete, key, || self.inner.delete(key))
            .await
    }

    /// The request is retried as a whole, and the keys the store refused with a retriable
    /// error are sent again (with the same backoff) until the attempts run out.
    async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, ObjStoreError)>> {
        let mut pending = keys.to_vec();
        let mut refused_for_good = Vec::new();
        let mut rounds = 0u32;
        loop {
            let first = pending.first().cloned().unwrap_or_default();
            let refused = self
                .simple(Op::DeleteMany, &first, || self.inner.delete_many(&pending))
                .await?;
            rounds += 1;
            let (again, final_): (Vec<_>, Vec<_>) =
                refused.into_iter().partition(|(_, e)| e.is_retriable());
            refused_for_good.extend(final_);
            if again.is_empty() || rounds >= self.config.max_attempts.max(1) {
                refused_for_good.extend(again);
                return Ok(refused_for_good);
            }
            tokio::time::sleep(self.backoff(rounds)).await;
            pending = again.into_iter().map(|(key, _)| key).collect();
        }
    }

    fn bucket(&self) -> &str {
        self.inner.bucket()
    }
}

#[cfg(test)]
#[path = "retrying_test.rs"]
mod tests;
