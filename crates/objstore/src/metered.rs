//! [`MeteredStore`]: counts requests, bytes and latency of every call that reaches the backend,
//! labelled by operation (`op`), bucket (`bucket`) and result (`outcome`).
//!
//! # Place in the stack
//!
//! `RetryingStore<MeteredStore<S3Store>>`: metering sits **below** the retrier, so every attempt
//! (every request S3 bills) is counted, failed ones included, under the outcome it had
//! (`throttled`, `timeout`, ...). Above the retrier it would count logical operations and hide
//! retries and their cost. The broker derives request cost per bucket (one bucket per AZ) from
//! `objstore_requests_total`.
//!
//! # Metrics (names as exported by `prometheus-client`)
//!
//! | name | type | labels |
//! |---|---|---|
//! | `objstore_requests_total` | counter | `op`, `bucket`, `outcome` |
//! | `objstore_request_duration_seconds` | histogram | `op`, `bucket`, `outcome` |
//! | `objstore_bytes_total` | counter | `op`, `bucket`, `direction` (`upload`/`download`) |
//!
//! `outcome` is `ok`, `already_exists` (a `put_if_absent` that found the key taken) or the error's
//! [`ObjStoreError::label`](crate::ObjStoreError::label). Bytes are counted for successful requests only: the payload of a
//! successful put, or the bytes returned by a get.

use std::future::Future;
use std::ops::Range;
use std::path::Path;

use async_trait::async_trait;
use bytes::Bytes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::{ObjStoreError, ObjectBody, ObjectMeta, ObjectStore, Op, PutOutcome, Result};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    op: &'static str,
    bucket: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BytesLabels {
    op: &'static str,
    bucket: String,
    direction: &'static str,
}

type HistogramFamily = Family<RequestLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~16 s: S3 Express first-byte latency is single-digit ms, standard S3 tens of ms.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The object-store metric families. Cheap to clone (clones share the same series); one instance
/// is shared by all of a broker's stores and registered once.
#[derive(Debug, Clone)]
pub struct ObjStoreMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily,
    bytes: Family<BytesLabels, Counter>,
}

impl Default for ObjStoreMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjStoreMetrics {
    pub fn new() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            bytes: Family::default(),
        }
    }

    /// Registers the families (see the module docs for names) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "objstore_requests",
            "Object-store requests sent to the backend, by operation, bucket and outcome",
            self.requests.clone(),
        );
        registry.register(
            "objstore_request_duration_seconds",
            "Latency of object-store requests, by operation, bucket and outcome",
            self.latency.clone(),
        );
        registry.register(
            "objstore_bytes",
            "Payload bytes uploaded to / downloaded from the object store by successful requests",
            self.bytes.clone(),
        );
    }

    /// Requests counted so far for `(op, bucket, outcome)` (for tests and the cost estimate).
    pub fn requests(&self, op: Op, bucket: &str, outcome: &str) -> u64 {
        let Some(outcome) = outcome_label(outcome) else {
            return 0;
        };
        self.requests
            .get_or_create(&RequestLabels {
                op: op.as_str(),
                bucket: bucket.to_owned(),
                outcome,
            })
            .get()
    }

    /// Bytes counted so far for `(op, bucket)` in `direction` (`"upload"` or `"download"`).
    pub fn bytes(&self, op: Op, bucket: &str, direction: &str) -> u64 {
        let direction = match direction {
            "upload" => "upload",
            "download" => "download",
            _ => return 0,
        };
        self.bytes
            .get_or_create(&BytesLabels {
                op: op.as_str(),
                bucket: bucket.to_owned(),
                direction,
            })
            .get()
    }

    fn record(&self, op: Op, bucket: &str, outcome: &'static str, seconds: f64) {
        let labels = RequestLabels {
            op: op.as_str(),
            bucket: bucket.to_owned(),
            outcome,
        };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
    }

    fn add_bytes(&self, op: Op, bucket: &str, direction: &'static str, n: u64) {
        let labels = BytesLabels {
            op: op.as_str(),
            bucket: bucket.to_owned(),
            direction,
        };
        self.bytes.get_or_create(&labels).inc_by(n);
    }
}

/// Maps a caller's outcome string to the static label used in the families.
fn outcome_label(outcome: &str) -> Option<&'static str> {
    const LABELS: [&str; 10] = [
        "ok",
        "already_exists",
        "not_found",
        "unavailable",
        "timeout",
        "throttled",
        "invalid_range",
        "invalid_key",
        "error",
        "cancelled",
    ];
    LABELS.into_iter().find(|l| *l == outcome)
}

/// Wraps `S`, recording every call in an [`ObjStoreMetrics`].
#[derive(Debug)]
pub struct MeteredStore<S> {
    inner: S,
    metrics: ObjStoreMetrics,
}

/// Records a request that was dropped before it finished (its caller timed out or went away).
struct InFlight<'a> {
    metrics: &'a ObjStoreMetrics,
    op: Op,
    bucket: &'a str,
    start: tokio::time::Instant,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            let seconds = self.start.elapsed().as_secs_f64();
            self.metrics
                .record(self.op, self.bucket, "cancelled", seconds);
        }
    }
}

impl<S: ObjectStore> MeteredStore<S> {
    pub fn new(inner: S, metrics: ObjStoreMetrics) -> Self {
        Self { inner, metrics }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    pub fn metrics(&self) -> &ObjStoreMetrics {
        &self.metrics
    }

    /// Runs `call`, recording its outcome and latency; `outcome_of` names a success.
    async fn meter<T, F>(&self, op: Op, call: F, outcome_of: fn(&T) -> &'static str) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let bucket = self.inner.bucket();
        let mut in_flight = InFlight {
            metrics: &self.metrics,
            op,
            bucket,
            start: tokio::time::Instant::now(),
            done: false,
        };
        let result = call.await;
        in_flight.done = true;
        let outcome = match &result {
            Ok(value) => outcome_of(value),
            Err(err) => err.label(),
        };
        let seconds = in_flight.start.elapsed().as_secs_f64();
        self.metrics.record(op, bucket, outcome, seconds);
        result
    }

    fn ok<T>(_: &T) -> &'static str {
        "ok"
    }

    /// Meters one create-if-absent of `len` bytes: the bytes count only when it created.
    async fn meter_put_if_absent(
        &self,
        len: u64,
        call: impl std::future::Future<Output = Result<PutOutcome>>,
    ) -> Result<PutOutcome> {
        let outcome = self
            .meter(Op::PutIfAbsent, call, |o: &PutOutcome| match o {
                PutOutcome::Created => "ok",
                PutOutcome::AlreadyExists => "already_exists",
            })
            .await?;
        if outcome == PutOutcome::Created {
            self.metrics
                .add_bytes(Op::PutIfAbsent, self.bucket(), "upload", len);
        }
        Ok(outcome)
    }
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for MeteredStore<S> {
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let len = data.len() as u64;
        self.meter(Op::Put, self.inner.put(key, data), Self::ok)
            .await?;
        self.metrics
            .add_bytes(Op::Put, self.bucket(), "upload", len);
        Ok(())
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutOutcome> {
        let len = data.len() as u64;
        self.meter_put_if_absent(len, self.inner.put_if_absent(key, data))
            .await
    }

    async fn put_file(&self, key: &str, path: &Path, len: u64) -> Result<()> {
        self.meter(Op::Put, self.inner.put_file(key, path, len), Self::ok)
            .await?;
        self.metrics
            .add_bytes(Op::Put, self.bucket(), "upload", len);
        Ok(())
    }

    async fn put_body_if_absent(&self, key: &str, body: ObjectBody) -> Result<PutOutcome> {
        let len = body.len();
        self.meter_put_if_absent(len, self.inner.put_body_if_absent(key, body))
            .await
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let data = self.meter(Op::Get, self.inner.get(key), Self::ok).await?;
        self.metrics
            .add_bytes(Op::Get, self.bucket(), "download", data.len() as u64);
        Ok(data)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let data = self
            .meter(Op::GetRange, self.inner.get_range(key, range), Self::ok)
            .await?;
        self.metrics
            .add_bytes(Op::GetRange, self.bucket(), "download", data.len() as u64);
        Ok(data)
    }

    async fn get_range_pieces(&self, key: &str, range: Range<u64>) -> Result<Vec<Bytes>> {
        let pieces = self
            .meter(
                Op::GetRange,
                self.inner.get_range_pieces(key, range),
                Self::ok,
            )
            .await?;
        let len: usize = pieces.iter().map(Bytes::len).sum();
        self.metrics
            .add_bytes(Op::GetRange, self.bucket(), "download", len as u64);
        Ok(pieces)
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        self.meter(Op::Head, self.inner.head(key), Self::ok).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.meter(Op::List, self.inner.list(prefix), Self::ok)
            .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.meter(Op::Delete, self.inner.delete(key), Self::ok)
            .await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<Vec<(String, ObjStoreError)>> {
        self.meter(Op::DeleteMany, self.inner.delete_many(keys), Self::ok)
            .await
    }

    fn bucket(&self) -> &str {
        self.inner.bucket()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultKind, FaultyStore, MemoryStore};
    use prometheus_client::encoding::text::encode;

    #[tokio::test]
    async fn counts_requests_bytes_and_outcomes_per_operation() {
        let metrics = ObjStoreMetrics::new();
        let faulty = FaultyStore::new(MemoryStore::new(), 1);
        let faults = faulty.controller();
        let store = MeteredStore::new(faulty, metrics.clone());
        store.put("a", Bytes::from_static(b"12345")).await.unwrap();
        store
            .put_if_absent("a", Bytes::from_static(b"x"))
            .await
            .unwrap();
        store.get_range("a", 1..3).await.unwrap();
        let _ = store.get("missing").await;
        faults.fail_next(Op::Get, 1, FaultKind::Throttled);
        let _ = store.get("a").await;
        store.get("a").await.unwrap();

        let b = "memory";
        assert_eq!(metrics.requests(Op::Put, b, "ok"), 1);
        assert_eq!(metrics.requests(Op::PutIfAbsent, b, "already_exists"), 1);
        assert_eq!(metrics.requests(Op::GetRange, b, "ok"), 1);
        assert_eq!(metrics.requests(Op::Get, b, "not_found"), 1);
        assert_eq!(metrics.requests(Op::Get, b, "throttled"), 1);
        assert_eq!(metrics.requests(Op::Get, b, "ok"), 1);
        assert_eq!(metrics.bytes(Op::Put, b, "upload"), 5);
        assert_eq!(metrics.bytes(Op::PutIfAbsent, b, "upload"), 0);
        assert_eq!(metrics.bytes(Op::GetRange, b, "download"), 2);
        assert_eq!(metrics.bytes(Op::Get, b, "download"), 5);

        // A batch delete is one request, whatever the store does underneath.
        let keys = ["a".to_string(), "b".to_string(), "c".to_string()];
        assert!(store.delete_many(&keys).await.unwrap().is_empty());
        assert_eq!(metrics.requests(Op::DeleteMany, b, "ok"), 1);
        assert_eq!(metrics.requests(Op::Delete, b, "ok"), 0);
    }

    #[tokio::test]
    async fn registered_families_export_with_op_bucket_outcome_labels() {
        let metrics = ObjStoreMetrics::new();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let store = MeteredStore::new(MemoryStore::new(), metrics);
        store.put("k", Bytes::from_static(b"abc")).await.unwrap();
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"objstore_requests_total{op="put",bucket="memory",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"objstore_bytes_total{op="put",bucket="memory",direction="upload"} 3"#)
        );
        assert!(text.contains("objstore_request_duration_seconds_bucket{"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_dropped_by_its_caller_is_counted_as_cancelled() {
        let metrics = ObjStoreMetrics::new();
        let faulty = FaultyStore::new(MemoryStore::new(), 1);
        faulty
            .controller()
            .set_latency(Op::Head, std::time::Duration::from_secs(10));
        let store = MeteredStore::new(faulty, metrics.clone());
        let timed_out =
            tokio::time::timeout(std::time::Duration::from_secs(1), store.head("k")).await;
        assert!(timed_out.is_err());
        assert_eq!(metrics.requests(Op::Head, "memory", "cancelled"), 1);
    }

    #[tokio::test]
    async fn metering_is_transparent() {
        let store = MeteredStore::new(MemoryStore::new(), ObjStoreMetrics::new());
        crate::testing::conformance(&store).await;
    }
}
