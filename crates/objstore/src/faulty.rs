//! [`FaultyStore`]: a test wrapper that injects failures and latency into any [`ObjectStore`],
//! steered at run time through a [`FaultController`].
//!
//! Faults are checked in this order on every call:
//!
//! 1. **Unavailability** ([`FaultController::set_unavailable`]): every operation fails with
//!    `Unavailable` without reaching the inner store (a whole AZ's bucket is gone).
//! 2. **Latency** ([`FaultController::set_latency`]): a `tokio::time::sleep` before the call
//!    (tests under `tokio::time::pause` see it instantly and deterministically).
//! 3. **Fail next N** ([`FaultController::fail_next`]): the next N matching calls fail. With
//!    [`FaultController::fail_next_after_apply`] the write *is* applied to the inner store and
//!    then reported as a `Timeout`: the ambiguous failure that retries must survive.
//! 4. **Probability** ([`FaultController::fail_with_probability`]): each matching call fails with
//!    probability p, drawn from an RNG seeded at construction, so a run is repeatable given the
//!    seed and the order of calls.
//!
//! Rules for a specific [`Op`] are consulted before rules for [`FaultTarget::Any`].

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{ObjStoreError, ObjectBody, ObjectMeta, ObjectStore, Op, PutOutcome, Result};

/// Which operations a fault rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultTarget {
    Any,
    Op(Op),
}

impl From<Op> for FaultTarget {
    fn from(op: Op) -> Self {
        FaultTarget::Op(op)
    }
}

/// The error an injected fault produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    Unavailable,
    Timeout,
    Throttled,
    /// A non-retriable failure.
    Other,
}

impl FaultKind {
    fn error(self, op: Op, key: &str) -> ObjStoreError {
        let op = op.as_str();
        let message = format!("injected fault on {key}");
        match self {
            FaultKind::Unavailable => ObjStoreError::Unavailable {
                op,
                message,
                source: None,
            },
            FaultKind::Timeout => ObjStoreError::Timeout { op, message },
            FaultKind::Throttled => ObjStoreError::Throttled { op, message },
            FaultKind::Other => ObjStoreError::Other {
                op,
                message,
                source: None,
            },
        }
    }
}

#[derive(Debug, Default)]
struct Rule {
    fail_next: u32,
    fail_next_kind: Option<FaultKind>,
    fail_next_after_apply: bool,
    probability: f64,
    probability_kind: Option<FaultKind>,
    latency: Duration,
}

#[derive(Debug)]
struct State {
    unavailable: bool,
    rules: HashMap<FaultTarget, Rule>,
    rng: StdRng,
    injected: u64,
}

/// What to do with one call, decided under the lock.
#[derive(Debug, Default)]
struct Decision {
    latency: Duration,
    fail: Option<FaultKind>,
    after_apply: bool,
}

/// The handle that steers a [`FaultyStore`]; clones steer the same store.
#[derive(Debug, Clone)]
pub struct FaultController {
    state: Arc<Mutex<State>>,
}

impl FaultController {
    fn new(seed: u64) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                unavailable: false,
                rules: HashMap::new(),
                rng: StdRng::seed_from_u64(seed),
                injected: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Updates under this lock are single assignments, so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes every operation fail with `Unavailable` (`true`) or behave normally again.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.lock().unavailable = unavailable;
    }

    /// The next `n` calls matching `target` fail with `kind` before reaching the inner store.
    pub fn fail_next(&self, target: impl Into<FaultTarget>, n: u32, kind: FaultKind) {
        let mut state = self.lock();
        let rule = state.rules.entry(target.into()).or_default();
        rule.fail_next = n;
        rule.fail_next_kind = Some(kind);
        rule.fail_next_after_apply = false;
    }

    /// The next `n` calls matching `target` reach the inner store (a write is applied) and then
    /// fail with `Timeout`, as when a response is lost.
    pub fn fail_next_after_apply(&self, target: impl Into<FaultTarget>, n: u32) {
        let mut state = self.lock();
        let rule = state.rules.entry(target.into()).or_default();
        rule.fail_next = n;
        rule.fail_next_kind = Some(FaultKind::Timeout);
        rule.fail_next_after_apply = true;
    }

    /// Each call matching `target` fails with `kind` with probability `p` (clamped to 0..=1).
    pub fn fail_with_probability(&self, target: impl Into<FaultTarget>, p: f64, kind: FaultKind) {
        let mut state = self.lock();
        let rule = state.rules.entry(target.into()).or_default();
        rule.probability = p.clamp(0.0, 1.0);
        rule.probability_kind = Some(kind);
    }

    /// Delays every call matching `target` by `latency` (zero removes the delay).
    pub fn set_latency(&self, target: impl Into<FaultTarget>, latency: Duration) {
        self.lock().rules.entry(target.into()).or_default().latency = latency;
    }

    /// Removes every rule and unavailability (the RNG keeps its position).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.unavailable = false;
        state.rules.clear();
    }

    /// How many faults have been injected so far.
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    fn decide(&self, op: Op) -> Decision {
        let mut state = self.lock();
        let state = &mut *state;
        if state.unavailable {
            state.injected += 1;
            return Decision {
                fail: Some(FaultKind::Unavailable),
                ..Decision::default()
            };
        }
        let mut decision = Decision::default();
        for target in [FaultTarget::Op(op), FaultTarget::Any] {
            if let Some(rule) = state.rules.get(&target) {
                decision.latency += rule.latency;
            }
        }
        for target in [FaultTarget::Op(op), FaultTarget::Any] {
            let Some(rule) = state.rules.get_mut(&target) else {
                continue;
            };
            if rule.fail_next > 0 {
                rule.fail_next -= 1;
                decision.fail = rule.fail_next_kind;
                decision.after_apply = rule.fail_next_after_apply;
                break;
            }
            if rule.probability > 0.0 && state.rng.random_bool(rule.probability) {
                decision.fail = rule.probability_kind;
                break;
            }
        }
        if decision.fail.is_some() {
            state.injected += 1;
        }
        decision
    }
}

/// Wraps `S`, injecting the faults its [`FaultController`] asks for.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    controller: FaultController,
}

impl<S: ObjectStore> FaultyStore<S> {
    /// Wraps `inner`; `seed` fixes the sequence of probabilistic faults.
    pub fn new(inner: S, seed: u64) -> Self {
        Self {
            inner,
            controller: FaultController::new(seed),
        }
    }

    /// A handle to steer this store's faults.
    pub fn controller(&self) -> FaultController {
        self.controller.clone()
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    async fn run<T, F>(&self, op: Op, key: &str, call: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let decision = self.controller.decide(op);
        if !decision.latency.is_zero() {
            tokio::time::sleep(decision.latency).await;
        }
        match decision.fail {
            Some(kind) if decision.after_apply => {
                // The inner result is dropped: the caller only learns that it timed out.
                let _ = call.await;
                Err(kind.error(op, key))
            }
            Some(kind) => Err(kind.error(op, key)),
            None => call.await,
        }
    }
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for FaultyStore<S> {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.run(Op::Put, key, self.inner.put(key, data)).await
    }
    async fn put_file(&self, key: &str, path: &Path, len: u64) -> Result<()> {
        self.run(Op::Put, key, self.inner.put_file(key, path, len))
            .await
    }
    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
        self.run(Op::PutIfAbsent, key, self.inner.put_if_absent(key, data))
            .await
    }
    async fn put_body_if_absent(&self, key: &str, body: ObjectBody) -> Result<PutOutcome> {
        self.run(
            Op::PutIfAbsent,
            key,
            self.inner.put_body_if_absent(key, body),
        )
        .await
    }
    async fn get(&self, key: &str) -> Result<Bytes> {
        self.run(Op::Get, key, self.inner.get(key)).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.run(Op::GetRange, key, self.inner.get_range(key, range))
            .await
    }
    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        self.run(Op::Head, key, self.inner.head(key)).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.run(Op::List, prefix, self.inner.list(prefix)).await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        self.run(Op::Delete, key, self.inner.delete(key)).await
    }
    fn bucket(&self) -> &str {
        self.inner.bucket()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[tokio::test]
    async fn without_rules_the_wrapper_is_transparent() {
        crate::testing::conformance(&FaultyStore::new(MemoryStore::new(), 1)).await;
    }

    #[tokio::test]
    async fn fail_next_fails_exactly_n_matching_calls() {
        let store = FaultyStore::new(MemoryStore::new(), 1);
        let faults = store.controller();
        faults.fail_next(Op::Put, 2, FaultKind::Throttled);
        let data = Bytes::from_static(b"x");
        for _ in 0..2 {
            let err = store.put("k", data.clone()).await.unwrap_err();
            assert!(matches!(err, ObjStoreError::Throttled { .. }));
        }
        assert!(
            store.get("k").await.is_err(),
            "failed puts were not applied"
        );
        store.put("k", data.clone()).await.unwrap();
        assert_eq!(store.get("k").await.unwrap(), data, "other ops unaffected");
        assert_eq!(faults.injected(), 2);
    }

    #[tokio::test]
    async fn after_apply_faults_apply_the_write_and_report_a_timeout() {
        let store = FaultyStore::new(MemoryStore::new(), 1);
        store
            .controller()
            .fail_next_after_apply(FaultTarget::Any, 1);
        let err = store.put("k", Bytes::from_static(b"v")).await.unwrap_err();
        assert!(matches!(err, ObjStoreError::Timeout { .. }));
        assert_eq!(
            store.inner().get("k").await.unwrap(),
            Bytes::from_static(b"v")
        );
    }

    #[tokio::test]
    async fn unavailability_fails_everything_until_lifted() {
        let store = FaultyStore::new(MemoryStore::new(), 1);
        let faults = store.controller();
        store.put("k", Bytes::from_static(b"v")).await.unwrap();
        faults.set_unavailable(true);
        assert!(matches!(
            store.get("k").await,
            Err(ObjStoreError::Unavailable { .. })
        ));
        assert!(matches!(
            store.list("").await,
            Err(ObjStoreError::Unavailable { .. })
        ));
        assert!(matches!(
            store.delete("k").await,
            Err(ObjStoreError::Unavailable { .. })
        ));
        faults.set_unavailable(false);
        assert_eq!(store.get("k").await.unwrap(), Bytes::from_static(b"v"));
    }

    async fn failure_pattern(seed: u64) -> Vec<bool> {
        let store = FaultyStore::new(MemoryStore::new(), seed);
        store
            .controller()
            .fail_with_probability(FaultTarget::Any, 0.5, FaultKind::Unavailable);
        let mut pattern = Vec::new();
        for _ in 0..64 {
            pattern.push(store.head("k").await.is_err());
        }
        pattern
    }

    #[tokio::test]
    async fn probabilistic_faults_are_deterministic_given_the_seed() {
        let a = failure_pattern(42).await;
        assert_eq!(a, failure_pattern(42).await);
        assert_ne!(a, failure_pattern(43).await);
        assert!(a.contains(&true) && a.contains(&false));
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_added_on_the_tokio_clock() {
        let store = FaultyStore::new(MemoryStore::new(), 1);
        store
            .controller()
            .set_latency(Op::Head, Duration::from_secs(3));
        let start = tokio::time::Instant::now();
        store.head("k").await.unwrap();
        let after_head = start.elapsed();
        assert!(after_head >= Duration::from_secs(3), "{after_head:?}");
        store.list("").await.unwrap();
        assert_eq!(start.elapsed(), after_head, "list has no latency rule");
    }
}
