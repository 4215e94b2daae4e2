//! The leader side of the remote WAL: collect appends of many partitions, cut them into one
//! object every upload interval (or as soon as enough bytes wait), PUT it, and publish the
//! slices' metadata.
//!
//! Three layers, each testable alone:
//!
//! - [`UploadBatcher`] (pure, clock-driven, `batcher.rs`): buffers appends and decides when to
//!   cut an object.
//! - `PublishSequencer` (pure, `sequencer.rs`): turns upload completions, which may arrive in any order, into
//!   metadata to publish in offset order per partition.
//! - [`Uploader`] (async): runs PUTs through an `Arc<dyn ObjectStore>` with bounded
//!   concurrency and hands metadata to a [`MetadataPublisher`].
//!
//! # Invariants
//!
//! - **Appends never block.** [`Uploader::append`] takes a short lock and returns.
//! - **Memory is bounded.** Bytes waiting plus bytes of objects whose PUT has not finished never
//!   exceed `max_buffered_bytes`; an append that would pass the bound is dropped from the WAL
//!   path and reported as a [`ClassicFallback`] ("followers need the classic fetch for
//!   `from..end`"). The leader's log still has the data; only its route to followers changes.
//! - **Publish after PUT.** A slice's metadata is handed to the publisher only after its
//!   object's PUT succeeded.
//! - **Offset order per partition.** Objects are cut in sequence order and a partition's slices
//!   enter objects in offset order; the sequencer releases a partition's slice only when every
//!   earlier object holding that partition has resolved. A fast upload waits for a slow earlier
//!   one of the same partition; other partitions are not held up.
//! - **A failed upload becomes a gap, not a stall.** When a PUT fails (after the retries of the
//!   store stack below) or the publisher refuses records, those slices' offset ranges are
//!   reported as [`ClassicFallback`]s and later objects of the same partition still publish.
//!   Why not wait and retry: retries already happened below us (`RetryingStore`); holding later
//!   objects would pin memory and stall every follower of the partition behind one bad object,
//!   while followers already handle a gap by the KIP-1176 rule "metadata missing → classic
//!   fetch from the follower's log end offset, then back to the WAL path". Published offsets per
//!   partition still only increase.
//! - **Keys are unique and PUT at most once** (`put_if_absent`, `WalObjectKey` with a per-
//!   uploader sequence); an `AlreadyExists` answer is accepted only if the existing object has
//!   our size (our own earlier, ambiguous attempt).
//!
//! Who repairs after a crash: an object PUT but never published (crash, failed publish) has no
//! metadata; the garbage collector deletes WAL objects without metadata older than a grace
//! period. The data itself is safe in the leader's log and reaches followers classically.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use ferry_common::SharedClock;
use ferry_objstore::{ObjectBody, ObjectStore, PutOutcome};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::batcher::push_fallback;
pub use crate::batcher::{
    AppendOutcome, BatcherConfig, ClassicFallback, FallbackReason, PendingObject, PendingSlice,
    UploadBatcher, WalAppend, WalPartition,
};
use crate::error::{Result, WalError};
use crate::failure_log::FailureLog;
use crate::metadata::WalSliceMetadata;
use crate::sequencer::{PublishSequencer, Released, UploadResult};
use crate::stages::{Stage, StageMetrics};

/// Publishes WAL metadata to `__remote_wal_log_metadata`.
///
/// Contract: `records` arrive in offset order per partition; the call returns `Ok` only when
/// the records are in the topic, where followers can read them: appended by the metadata
/// partition's leader at least (acks=1), or held by its in-sync replicas (acks=all), as the
/// implementation chooses and documents. The uploader needs no more: a record lost afterwards
/// (a metadata-leader failover under acks=1) only sends its range to the classic fetch, like
/// any missing metadata. On `Err` the uploader treats the records as unpublished (their ranges
/// take the classic path); it does not retry.
#[async_trait]
pub trait MetadataPublisher: Send + Sync + std::fmt::Debug {
    async fn publish(&self, records: Vec<WalSliceMetadata>) -> Result<()>;
}

/// [`Uploader`] tuning.
#[derive(Debug, Clone)]
pub struct UploaderConfig {
    pub batcher: BatcherConfig,
    /// Most objects between cut and published at once (at least 1). Memory is bounded by
    /// `max_buffered_bytes`, not by this: it only has to be high enough that PUTs of a busy
    /// leader overlap (a PUT of 1 MiB takes several ms, one is cut per interval or MiB).
    pub max_in_flight: usize,
    /// Where the `cut_wait`, `put` and `publish` stages are recorded.
    pub stages: StageMetrics,
}

impl Default for UploaderConfig {
    fn default() -> Self {
        Self {
            batcher: BatcherConfig::default(),
            max_in_flight: 16,
            stages: StageMetrics::default(),
        }
    }
}

#[derive(Debug)]
struct Inner {
    batcher: Mutex<UploadBatcher>,
    sequencer: Mutex<PublishSequencer>,
    /// What the sequencer released and nobody has published yet, in release order (appended
    /// under the sequencer's lock).
    released: Mutex<Released>,
    /// Serialises "take what was released + publish", so publish calls keep their order.
    publish_lock: tokio::sync::Mutex<()>,
    store: Arc<dyn ObjectStore>,
    publisher: Arc<dyn MetadataPublisher>,
    clock: SharedClock,
    permits: Arc<Semaphore>,
    max_in_flight: u32,
    fallbacks: Mutex<Vec<ClassicFallback>>,
    wake: Notify,
    stages: StageMetrics,
    /// PUTs and metadata publishes that fail while the bucket or the metadata topic is down:
    /// logged when the failures start, every few seconds, and when they end.
    upload_failures: FailureLog,
    publish_failures: FailureLog,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its state consistent, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The per-broker uploader task: batcher + PUTs + ordered publishing. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Uploader {
    inner: Arc<Inner>,
}

impl Uploader {
    pub fn new(
        config: UploaderConfig,
        store: Arc<dyn ObjectStore>,
        publisher: Arc<dyn MetadataPublisher>,
        clock: SharedClock,
    ) -> Self {
        let max_in_flight = config.max_in_flight.clamp(1, Semaphore::MAX_PERMITS) as u32;
        let broker_id = config.batcher.broker_id;
        Self {
            inner: Arc::new(Inner {
                batcher: Mutex::new(UploadBatcher::new(config.batcher, clock.clone())),
                sequencer: Mutex::new(PublishSequencer::new(broker_id)),
                released: Mutex::new(Released::default()),
                publish_lock: tokio::sync::Mutex::new(()),
                store,
                publisher,
                clock,
                permits: Arc::new(Semaphore::new(max_in_flight as usize)),
                max_in_flight,
                fallbacks: Mutex::new(Vec::new()),
                wake: Notify::new(),
                stages: config.stages,
                upload_failures: FailureLog::default(),
                publish_failures: FailureLog::default(),
            }),
        }
    }

    /// Offers appended batches to the WAL path; never blocks on the store.
    pub fn append(&self, a: WalAppend) -> AppendOutcome {
        let (outcome, ready) = {
            let mut b = lock(&self.inner.batcher);
            let outcome = b.append(a);
            (outcome, b.is_ready())
        };
        if ready {
            self.inner.wake.notify_one();
        }
        outcome
    }

    /// Cuts and starts uploading every object whose trigger has fired, while PUT slots are free.
    /// Returns how many uploads started. Must run inside a tokio runtime.
    pub fn tick(&self) -> Result<usize> {
        self.start_uploads(false)
    }

    fn start_uploads(&self, force: bool) -> Result<usize> {
        let mut started = 0;
        loop {
            let Ok(permit) = self.inner.permits.clone().try_acquire_owned() else {
                return Ok(started);
            };
            let cut = {
                let mut b = lock(&self.inner.batcher);
                if force {
                    b.cut()
                } else {
                    b.poll_cut()
                }
            };
            let obj = match cut {
                Ok(Some(obj)) => obj,
                Ok(None) => return Ok(started),
                Err(e) => {
                    self.collect_batcher_fallbacks();
                    return Err(e);
                }
            };
            lock(&self.inner.sequencer).register(&obj);
            tokio::spawn(upload(self.inner.clone(), obj, permit));
            started += 1;
        }
    }

    /// Uploads everything waiting now (regardless of triggers) and waits until every upload has
    /// finished and its metadata was handed to the publisher.
    pub async fn flush(&self) -> Result<()> {
        loop {
            if lock(&self.inner.batcher).waiting_bytes() == 0 {
                break;
            }
            if self.start_uploads(true)? == 0 {
                // No free PUT slot: wait for one, then try again.
                let Ok(permit) = self.inner.permits.acquire().await else {
                    break;
                };
                drop(permit);
            }
        }
        self.wait_idle().await;
        Ok(())
    }

    /// Waits until no upload is in flight.
    pub async fn wait_idle(&self) {
        if let Ok(all) = self
            .inner
            .permits
            .acquire_many(self.inner.max_in_flight)
            .await
        {
            drop(all);
        }
    }

    /// Ranges that left the WAL path since the last call (buffer full, failed uploads, failed
    /// publishes), for the leader to serve to followers by the classic fetch.
    pub fn take_fallbacks(&self) -> Vec<ClassicFallback> {
        self.collect_batcher_fallbacks();
        std::mem::take(&mut *lock(&self.inner.fallbacks))
    }

    fn collect_batcher_fallbacks(&self) {
        let from_batcher = lock(&self.inner.batcher).take_fallbacks();
        let mut all = lock(&self.inner.fallbacks);
        for f in from_batcher {
            push_fallback(&mut all, f);
        }
    }

    /// Slice bytes held (waiting plus in flight).
    pub fn buffered_bytes(&self) -> usize {
        lock(&self.inner.batcher).buffered_bytes()
    }

    /// Runs until `shutdown` completes: cuts on the interval or size trigger, then flushes.
    /// Timers use tokio time; trigger decisions use the injected clock.
    pub async fn run<F: Future<Output = ()>>(&self, shutdown: F) {
        tokio::pin!(shutdown);
        loop {
            if let Err(e) = self.tick() {
                tracing::warn!(error = %e, "remote WAL uploader could not cut an object");
            }
            let wait_ms = {
                let b = lock(&self.inner.batcher);
                let now = self.inner.clock.now_ms();
                b.next_deadline_ms()
                    .map_or(b.config().upload_interval_ms, |d| d - now)
                    .clamp(1, i64::MAX) as u64
            };
            tokio::select! {
                _ = &mut shutdown => break,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            }
        }
        if let Err(e) = self.flush().await {
            tracing::warn!(error = %e, "remote WAL uploader flush on shutdown failed");
        }
    }

    #[cfg(test)]
    pub(crate) fn pending_objects(&self) -> usize {
        lock(&self.inner.sequencer).pending_objects()
    }
}

async fn put_object(store: &dyn ObjectStore, key: &str, data: ObjectBody) -> Result<()> {
    let size = data.len();
    match store.put_body_if_absent(key, data).await? {
        PutOutcome::Created => Ok(()),
        PutOutcome::AlreadyExists => match store.head(key).await? {
            // Our own earlier attempt that landed despite an ambiguous error.
            Some(meta) if meta.size == size => Ok(()),
            other => Err(WalError::Invalid(format!(
                "WAL object key {key} already holds a different object ({other:?})"
            ))),
        },
    }
}

async fn upload(inner: Arc<Inner>, obj: PendingObject, permit: OwnedSemaphorePermit) {
    let PendingObject {
        seq,
        key,
        data,
        buffered_bytes,
        oldest_append,
        ..
    } = obj;
    let key = key.to_string();
    let put_start = tokio::time::Instant::now();
    inner
        .stages
        .observe(Stage::CutWait, put_start.duration_since(oldest_append));
    let put = put_object(inner.store.as_ref(), &key, data).await;
    let put_done = tokio::time::Instant::now();
    inner
        .stages
        .observe(Stage::Put, put_done.duration_since(put_start));
    lock(&inner.batcher).release(buffered_bytes);
    let result = match put {
        Ok(()) => {
            inner.upload_failures.success("remote WAL uploads");
            UploadResult::Uploaded {
                bucket: inner.store.bucket().to_owned(),
                upload_time_ms: inner.clock.now_ms(),
            }
        }
        Err(e) => {
            if let Some(not_logged) = inner.upload_failures.failed() {
                tracing::warn!(%key, error = %e, not_logged,
                    "remote WAL upload failed; its ranges take the classic path");
            }
            UploadResult::Failed(FallbackReason::UploadFailed)
        }
    };
    {
        // Appended under the sequencer's lock, so the list stays in release order.
        let mut sequencer = lock(&inner.sequencer);
        let newly = sequencer.complete(seq, result);
        lock(&inner.released).append(newly);
    }
    {
        // One publish takes everything released while the previous one ran: on a loaded
        // cluster a publish waits for metadata leaders on other brokers, and one call per
        // object queued the objects behind each other (0.5 s mean publish stage at full load).
        // A later object's task finds nothing left and only waits for the publish of its
        // records before it lets its permit go.
        let _order = inner.publish_lock.lock().await;
        let released = std::mem::take(&mut *lock(&inner.released));
        let mut fallbacks = released.fallbacks;
        if !released.publish.is_empty() {
            let records: Vec<WalSliceMetadata> =
                released.publish.iter().map(|(_, m)| m.clone()).collect();
            let published = inner.publisher.publish(records).await;
            inner.stages.observe(Stage::Publish, put_done.elapsed());
            match published {
                Ok(()) => inner
                    .publish_failures
                    .success("remote WAL metadata publishes"),
                Err(e) => {
                    if let Some(not_logged) = inner.publish_failures.failed() {
                        tracing::warn!(%key, error = %e, not_logged,
                            "remote WAL metadata publish failed; ranges take the classic path");
                    }
                    for (tp, m) in released.publish {
                        push_fallback(
                            &mut fallbacks,
                            ClassicFallback {
                                tp,
                                topic_id: m.topic_id,
                                from_offset: m.base_offset,
                                end_offset: m.last_offset + 1,
                                reason: FallbackReason::PublishFailed,
                            },
                        );
                    }
                }
            }
        }
        let mut all = lock(&inner.fallbacks);
        for f in fallbacks {
            push_fallback(&mut all, f);
        }
    }
    drop(permit);
    inner.wake.notify_one();
}

#[cfg(test)]
#[path = "uploader_test.rs"]
mod tests;
