//! Tests of [`RetryingStore`]: recovery from transient faults, giving up, deadlines, the
//! ambiguous `put_if_absent` check, and the backoff schedule. All run on tokio's paused clock.

use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::{FaultKind, FaultTarget, FaultyStore, MemoryStore};

fn config(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        retry_backoff: Duration::from_millis(10),
        retry_backoff_max: Duration::from_millis(80),
        jitter: 0.2,
        request_timeout: Some(Duration::from_secs(1)),
        operation_timeout: Duration::from_secs(30),
        jitter_seed: Some(7),
    }
}

fn faulty(seed: u64) -> FaultyStore<MemoryStore> {
    FaultyStore::new(MemoryStore::new(), seed)
}

#[tokio::test(start_paused = true)]
async fn recovers_from_transient_faults_within_the_attempt_budget() {
    let store = RetryingStore::new(faulty(1), config(4));
    let faults = store.inner().controller();
    for kind in [
        FaultKind::Unavailable,
        FaultKind::Timeout,
        FaultKind::Throttled,
    ] {
        faults.fail_next(FaultTarget::Any, 3, kind);
        store.put("k", Bytes::from_static(b"v")).await.unwrap();
    }
    assert_eq!(faults.injected(), 9);
    faults.fail_next(Op::GetRange, 3, FaultKind::Unavailable);
    assert_eq!(
        store.get_range("k", 0..1).await.unwrap(),
        Bytes::from_static(b"v")
    );
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts_with_the_last_error() {
    let store = RetryingStore::new(faulty(1), config(3));
    let faults = store.inner().controller();
    faults.fail_next(Op::Get, 10, FaultKind::Throttled);
    let err = store.get("k").await.unwrap_err();
    assert!(matches!(err, ObjStoreError::Throttled { .. }), "{err:?}");
    assert_eq!(faults.injected(), 3, "exactly max_attempts attempts");
}

#[tokio::test(start_paused = true)]
async fn final_errors_are_not_retried() {
    let store = RetryingStore::new(faulty(1), config(5));
    let faults = store.inner().controller();
    faults.fail_next(Op::Put, 5, FaultKind::Other);
    assert!(store.put("k", Bytes::new()).await.is_err());
    assert_eq!(faults.injected(), 1);
    let err = store.get("missing").await.unwrap_err();
    assert!(matches!(err, ObjStoreError::NotFound { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_hits_the_request_and_operation_timeouts() {
    let store = RetryingStore::new(
        faulty(1),
        RetryConfig {
            operation_timeout: Duration::from_secs(3),
            ..config(100)
        },
    );
    store
        .inner()
        .controller()
        .set_latency(Op::Head, Duration::from_secs(60));
    let start = tokio::time::Instant::now();
    let err = store.head("k").await.unwrap_err();
    assert!(matches!(err, ObjStoreError::Timeout { .. }), "{err:?}");
    assert!(
        start.elapsed() <= Duration::from_secs(3),
        "bounded by operation_timeout"
    );
}

#[tokio::test(start_paused = true)]
async fn put_if_absent_recognises_its_own_write_after_an_ambiguous_failure() {
    let store = RetryingStore::new(faulty(1), config(3));
    let faults = store.inner().controller();
    // The first attempt lands but its response is lost; the retry sees AlreadyExists.
    faults.fail_next_after_apply(Op::PutIfAbsent, 1);
    let outcome = store
        .put_if_absent("k", Bytes::from_static(b"mine"))
        .await
        .unwrap();
    assert_eq!(outcome, PutOutcome::Created);
    assert_eq!(faults.injected(), 1);

    // Someone else's object stays someone else's, even after an ambiguous failure.
    faults.fail_next(Op::PutIfAbsent, 1, FaultKind::Timeout);
    let outcome = store
        .put_if_absent("k", Bytes::from_static(b"other"))
        .await
        .unwrap();
    assert_eq!(outcome, PutOutcome::AlreadyExists);
    // And without any failure, AlreadyExists is reported as is (no read-back).
    let outcome = store
        .put_if_absent("k", Bytes::from_static(b"mine"))
        .await
        .unwrap();
    assert_eq!(outcome, PutOutcome::AlreadyExists);
}

#[tokio::test(start_paused = true)]
async fn conformance_holds_through_random_transient_faults() {
    let store = RetryingStore::new(faulty(2024), config(20));
    let faults = store.inner().controller();
    faults.fail_with_probability(FaultTarget::Any, 0.3, FaultKind::Unavailable);
    faults.fail_with_probability(Op::Get, 0.3, FaultKind::Throttled);
    crate::testing::conformance(&store).await;
    assert!(
        faults.injected() > 20,
        "faults were injected: {}",
        faults.injected()
    );
}

#[test]
fn backoff_doubles_from_retry_backoff_up_to_the_max() {
    let config = config(10);
    let schedule: Vec<u64> = (1..=6)
        .map(|n| config.base_backoff(n).as_millis() as u64)
        .collect();
    assert_eq!(schedule, [10, 20, 40, 80, 80, 80]);
    assert_eq!(config.base_backoff(u32::MAX), Duration::from_millis(80));
}

#[test]
fn jitter_stays_within_bounds_and_follows_the_seed() {
    let a = RetryingStore::new(MemoryStore::new(), config(10));
    let b = RetryingStore::new(MemoryStore::new(), config(10));
    for n in 1..50 {
        let wait = a.backoff(n);
        let base = a.config().base_backoff(n);
        assert!(
            wait >= base.mul_f64(0.8) && wait <= base.mul_f64(1.2),
            "{wait:?} vs {base:?}"
        );
        assert_eq!(wait, b.backoff(n), "same seed, same jitter");
    }
}
