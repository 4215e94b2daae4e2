//! The S3 backend against a real S3 API server on loopback: `s3s-fs` (installed by
//! `scripts/install-s3s-fs.sh`), which checks SigV4 signatures and supports conditional writes.
//!
//! Each test starts its own `s3s-fs` on 127.0.0.1 with an ephemeral port and a temp root, and
//! kills it when done (also on panic). If the binary is missing the tests FAIL and say how to
//! install it, unless `FERRY_SKIP_S3_TESTS=1`, in which case they print that they were skipped.
//! `FERRY_S3S_FS=/path/to/s3s-fs` overrides where the binary is looked up.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_objstore::testing::S3sFs;
use ferry_objstore::{
    FaultKind, FaultyStore, MeteredStore, ObjStoreMetrics, ObjectStore, Op, PutOutcome,
    RetryConfig, RetryingStore, S3Config, S3Store,
};

const ACCESS_KEY: &str = "ferry-test-access";
const SECRET_KEY: &str = "ferry-test-secret-key";
const BUCKET: &str = "ferry-test";

fn start_server(test: &str) -> Option<S3sFs> {
    S3sFs::start(test, &[], ACCESS_KEY, SECRET_KEY)
}

fn config(server: &S3sFs) -> S3Config {
    S3Config {
        bucket: BUCKET.into(),
        region: "us-east-1".into(),
        endpoint: Some(server.endpoint.clone()),
        force_path_style: true,
        access_key: Some(ACCESS_KEY.into()),
        secret_key: Some(SECRET_KEY.into()),
        express_one_zone: false,
    }
}

async fn store_with_bucket(server: &S3sFs) -> S3Store {
    let store = S3Store::connect(&config(server)).await.expect("S3 client");
    store
        .client()
        .create_bucket()
        .bucket(BUCKET)
        .send()
        .await
        .expect("create bucket");
    store
}

#[tokio::test]
async fn s3_backend_passes_conformance_against_s3s_fs() {
    let Some(server) = start_server("s3_backend_passes_conformance_against_s3s_fs") else {
        return;
    };
    let store = store_with_bucket(&server).await;
    ferry_objstore::testing::conformance(&store).await;
}

#[tokio::test]
async fn conditional_put_reports_already_exists_the_second_time() {
    let Some(server) = start_server("conditional_put_reports_already_exists_the_second_time")
    else {
        return;
    };
    let store = store_with_bucket(&server).await;
    let key = "wal/1/0000000000001-0000000001.wal";
    let first = store.put_if_absent(key, Bytes::from_static(b"first")).await;
    assert_eq!(first.expect("first conditional put"), PutOutcome::Created);
    let second = store
        .put_if_absent(key, Bytes::from_static(b"second"))
        .await;
    assert_eq!(
        second.expect("second conditional put"),
        PutOutcome::AlreadyExists
    );
    assert_eq!(
        store.get(key).await.expect("get"),
        Bytes::from_static(b"first")
    );
}

#[tokio::test]
async fn wrong_credentials_are_a_final_error() {
    let Some(server) = start_server("wrong_credentials_are_a_final_error") else {
        return;
    };
    let _ = store_with_bucket(&server).await;
    let bad = S3Store::connect(&S3Config {
        secret_key: Some("not-the-secret".into()),
        ..config(&server)
    })
    .await
    .expect("client");
    let err = bad
        .put("k", Bytes::from_static(b"x"))
        .await
        .expect_err("bad signature");
    assert!(!err.is_retriable(), "{err:?}");
}

#[tokio::test]
async fn a_stopped_server_is_unavailable_and_retriable() {
    let Some(mut server) = start_server("a_stopped_server_is_unavailable_and_retriable") else {
        return;
    };
    let store = store_with_bucket(&server).await;
    let _ = server.child.kill();
    let _ = server.child.wait();
    let err = store.get("k").await.expect_err("server is gone");
    assert!(
        err.is_retriable(),
        "connection refused must be retriable: {err:?}"
    );
}

#[tokio::test]
async fn the_production_stack_recovers_from_transient_faults_and_meters_every_attempt() {
    let Some(server) = start_server("the_production_stack_recovers_from_transient_faults") else {
        return;
    };
    let s3 = store_with_bucket(&server).await;
    let faulty = FaultyStore::new(s3, 99);
    let faults = faulty.controller();
    let metrics = ObjStoreMetrics::new();
    let store: Arc<dyn ObjectStore> = Arc::new(RetryingStore::new(
        MeteredStore::new(faulty, metrics.clone()),
        RetryConfig {
            max_attempts: 6,
            retry_backoff: Duration::from_millis(1),
            retry_backoff_max: Duration::from_millis(5),
            jitter_seed: Some(1),
            ..RetryConfig::default()
        },
    ));
    faults.fail_next(Op::PutIfAbsent, 2, FaultKind::Throttled);
    faults.fail_next(Op::GetRange, 3, FaultKind::Unavailable);
    let key = "wal/2/0000000000005-0000000000.wal";
    let data = ferry_objstore::testing::pattern(10_000, 1);
    let outcome = store
        .put_if_absent(key, data.clone())
        .await
        .expect("put through faults");
    assert_eq!(outcome, PutOutcome::Created);
    let got = store
        .get_range(key, 100..200)
        .await
        .expect("range through faults");
    assert_eq!(got, data.slice(100..200));
    // A lost response after the write landed: the retry recognises its own object.
    faults.fail_next_after_apply(Op::PutIfAbsent, 1);
    let key2 = "wal/2/0000000000006-0000000001.wal";
    let outcome = store
        .put_if_absent(key2, data.clone())
        .await
        .expect("ambiguous put");
    assert_eq!(outcome, PutOutcome::Created);
    assert_eq!(faults.injected(), 6);
    // Metering sits below the retrier: failed attempts are counted too.
    assert_eq!(metrics.requests(Op::PutIfAbsent, BUCKET, "throttled"), 2);
    assert_eq!(metrics.requests(Op::PutIfAbsent, BUCKET, "ok"), 1);
    assert_eq!(metrics.requests(Op::PutIfAbsent, BUCKET, "timeout"), 1);
    assert_eq!(
        metrics.requests(Op::PutIfAbsent, BUCKET, "already_exists"),
        1
    );
    assert_eq!(
        metrics.requests(Op::Get, BUCKET, "ok"),
        1,
        "read-back after ambiguity"
    );
    assert_eq!(metrics.requests(Op::GetRange, BUCKET, "unavailable"), 3);
    assert_eq!(metrics.requests(Op::GetRange, BUCKET, "ok"), 1);
    // The wrapped stack is as transparent as the bare backend.
    ferry_objstore::testing::conformance(store.as_ref()).await;
    // Not run here: `testing::conformance_with_races`. s3s-fs 0.14 evaluates If-None-Match
    // before writing without a lock, so concurrent conditional puts can all "win" on it
    // (observed: 8 of 8). AWS S3 and S3 Express resolve the race server-side (one 200, the
    // rest 412 or 409 ConditionalRequestConflict, which we retry); the local and memory
    // backends run the race check in their unit tests.
}

/// With an endpoint configured, PUT and GET go out directly (signed by ferry, not the SDK's
/// pipeline): keys with characters a URL must encode land under the same name the SDK's LIST
/// and HEAD see, and ranges and errors behave as through the SDK.
#[tokio::test]
async fn direct_puts_and_gets_agree_with_the_sdk_on_keys_ranges_and_errors() {
    let Some(server) = start_server("direct_puts_and_gets_agree_with_the_sdk") else {
        return;
    };
    let store = store_with_bucket(&server).await;
    assert!(store.sends_puts_and_gets_directly());
    let key = "wal/a b+c%d=e&f~g/é-ü.wal";
    let data = Bytes::from((0..=255u8).cycle().take(70_000).collect::<Vec<_>>());
    assert_eq!(
        store.put_if_absent(key, data.clone()).await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(
        store
            .put_if_absent(key, Bytes::from_static(b"other"))
            .await
            .unwrap(),
        PutOutcome::AlreadyExists
    );
    let listed = store.list("wal/").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, key);
    assert_eq!(store.head(key).await.unwrap().unwrap().size, 70_000);
    assert_eq!(store.get(key).await.unwrap(), data);
    assert_eq!(
        store.get_range(key, 1_000..65_000).await.unwrap(),
        data.slice(1_000..65_000)
    );
    let err = store.get_range(key, 69_000..71_000).await.unwrap_err();
    assert!(
        matches!(err, ferry_objstore::ObjStoreError::InvalidRange { .. }),
        "{err:?}"
    );
    let err = store.get("wal/missing").await.unwrap_err();
    assert!(
        matches!(err, ferry_objstore::ObjStoreError::NotFound { .. }),
        "{err:?}"
    );
    store.delete(key).await.unwrap();
    let err = store.get_range(key, 0..10).await.unwrap_err();
    assert!(
        matches!(err, ferry_objstore::ObjStoreError::NotFound { .. }),
        "{err:?}"
    );
}
