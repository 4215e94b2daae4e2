//! The leader side of the remote WAL: collect appends of many partitions, cut them into one
//! object every upload interval (or as soon as enough bytes wait), PUT it, and publish the
//! slices' metadata.
//!
//! Three layers, each testable alone:
//!
//! - [`UploadBatcher`] (pure, clock-driven): buffers appends and decides when to cut an object.
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

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use ferry_common::{SharedClock, TopicPartition};
use ferry_objstore::keys::WalObjectKey;
use ferry_objstore::{ObjectStore, PutOutcome};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::error::{Result, WalError};
use crate::format::{ObjectBuilder, SliceEntry, SliceInfo};
use crate::metadata::WalSliceMetadata;
use crate::sequencer::{PublishSequencer, UploadResult};
use crate::stages::{Stage, StageMetrics};

/// Tuning of the batcher (`remote.wal.*` configs).
#[derive(Debug, Clone)]
pub struct BatcherConfig {
    /// The uploading broker (part of every object key).
    pub broker_id: i32,
    /// `remote.wal.upload.interval.ms`: longest time a byte waits before its object is cut.
    pub upload_interval_ms: i64,
    /// `remote.wal.upload.max.bytes`: cut as soon as this many bytes wait. An object holds at
    /// most this plus one append.
    pub upload_max_bytes: usize,
    /// Bound on waiting plus in-flight slice bytes; beyond it appends take the classic path.
    pub max_buffered_bytes: usize,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        Self {
            broker_id: 0,
            upload_interval_ms: 10,
            upload_max_bytes: 1 << 20,
            max_buffered_bytes: 64 << 20,
        }
    }
}

/// A partition as the WAL names it (topic id, not name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WalPartition {
    pub topic_id: Uuid,
    pub partition: i32,
}

/// Record batches just appended to a leader's log, as they are stored there.
#[derive(Debug, Clone)]
pub struct WalAppend {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub base_offset: i64,
    pub last_offset: i64,
    /// The leader's current epoch for the partition.
    pub leader_epoch: i32,
    /// Whole record batches, byte for byte as in the log.
    pub records: Bytes,
}

/// What happened to one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Waiting for the next object.
    Buffered,
    /// Not taken into the WAL path; followers need the classic fetch from this offset.
    Dropped { classic_from: i64 },
}

/// Why a range left the WAL path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// `max_buffered_bytes` was reached (slow or failing store).
    BufferFull,
    /// The object's PUT failed.
    UploadFailed,
    /// The metadata publisher refused the records.
    PublishFailed,
    /// The append itself was malformed (empty, or not an offset range).
    InvalidAppend,
}

/// Offsets `from_offset..end_offset` of a partition reach followers only by the classic fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicFallback {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub from_offset: i64,
    /// Exclusive.
    pub end_offset: i64,
    pub reason: FallbackReason,
}

pub(crate) fn push_fallback(list: &mut Vec<ClassicFallback>, f: ClassicFallback) {
    if let Some(last) = list.last_mut() {
        if last.tp == f.tp
            && last.topic_id == f.topic_id
            && last.reason == f.reason
            && last.end_offset == f.from_offset
        {
            last.end_offset = f.end_offset;
            return;
        }
    }
    list.push(f);
}

/// One slice of a cut object, with the partition's name for reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSlice {
    pub tp: TopicPartition,
    pub entry: SliceEntry,
}

/// A cut object, ready to PUT.
#[derive(Debug, Clone)]
pub struct PendingObject {
    /// Cut order; also the key's sequence number.
    pub seq: u64,
    pub key: WalObjectKey,
    pub data: Bytes,
    pub slices: Vec<PendingSlice>,
    /// Slice bytes this object holds against `max_buffered_bytes`; hand back with
    /// [`UploadBatcher::release`] when the PUT has finished.
    pub buffered_bytes: usize,
    /// When its oldest byte was appended (the `cut_wait` stage starts there).
    pub oldest_append: tokio::time::Instant,
}

/// Consecutive appends of one partition under one epoch: becomes one slice.
#[derive(Debug)]
struct Run {
    leader_epoch: i32,
    base_offset: i64,
    last_offset: i64,
    chunks: Vec<Bytes>,
    bytes: usize,
}

#[derive(Debug)]
struct PartitionBuffer {
    tp: TopicPartition,
    runs: Vec<Run>,
}

/// The pure batching core: buffers appends and cuts objects.
#[derive(Debug)]
pub struct UploadBatcher {
    config: BatcherConfig,
    clock: SharedClock,
    waiting: BTreeMap<WalPartition, PartitionBuffer>,
    waiting_bytes: usize,
    waiting_runs: usize,
    in_flight_bytes: usize,
    oldest_waiting_ms: Option<i64>,
    /// The same moment on the monotonic clock, for the `cut_wait` stage.
    oldest_waiting_at: Option<tokio::time::Instant>,
    next_seq: u64,
    last_created_ms: i64,
    fallbacks: Vec<ClassicFallback>,
}

impl UploadBatcher {
    pub fn new(config: BatcherConfig, clock: SharedClock) -> Self {
        Self {
            config,
            clock,
            waiting: BTreeMap::new(),
            waiting_bytes: 0,
            waiting_runs: 0,
            in_flight_bytes: 0,
            oldest_waiting_ms: None,
            oldest_waiting_at: None,
            next_seq: 0,
            last_created_ms: 0,
            fallbacks: Vec::new(),
        }
    }

    pub fn config(&self) -> &BatcherConfig {
        &self.config
    }

    /// Takes an append into the next object, or drops it from the WAL path (never blocks).
    pub fn append(&mut self, a: WalAppend) -> AppendOutcome {
        let len = a.records.len();
        let fallback = |reason| ClassicFallback {
            tp: a.tp.clone(),
            topic_id: a.topic_id,
            from_offset: a.base_offset,
            end_offset: a.last_offset.saturating_add(1),
            reason,
        };
        if len == 0 || len > u32::MAX as usize || a.base_offset < 0 || a.last_offset < a.base_offset
        {
            tracing::warn!(tp = %a.tp, base = a.base_offset, last = a.last_offset, len,
                "malformed WAL append; the range takes the classic path");
            push_fallback(&mut self.fallbacks, fallback(FallbackReason::InvalidAppend));
            return AppendOutcome::Dropped {
                classic_from: a.base_offset,
            };
        }
        if self.buffered_bytes() + len > self.config.max_buffered_bytes {
            push_fallback(&mut self.fallbacks, fallback(FallbackReason::BufferFull));
            return AppendOutcome::Dropped {
                classic_from: a.base_offset,
            };
        }
        let key = WalPartition {
            topic_id: a.topic_id,
            partition: a.tp.partition,
        };
        let buf = self.waiting.entry(key).or_insert_with(|| PartitionBuffer {
            tp: a.tp.clone(),
            runs: Vec::new(),
        });
        let extends = buf.runs.last().is_some_and(|r| {
            r.leader_epoch == a.leader_epoch
                && r.last_offset.checked_add(1) == Some(a.base_offset)
                && r.bytes + len <= u32::MAX as usize
        });
        match buf.runs.last_mut() {
            Some(run) if extends => {
                run.last_offset = a.last_offset;
                run.bytes += len;
                run.chunks.push(a.records);
            }
            _ => {
                buf.runs.push(Run {
                    leader_epoch: a.leader_epoch,
                    base_offset: a.base_offset,
                    last_offset: a.last_offset,
                    chunks: vec![a.records],
                    bytes: len,
                });
                self.waiting_runs += 1;
            }
        }
        self.waiting_bytes += len;
        if self.oldest_waiting_ms.is_none() {
            self.oldest_waiting_ms = Some(self.clock.now_ms());
            self.oldest_waiting_at = Some(tokio::time::Instant::now());
        }
        AppendOutcome::Buffered
    }

    /// Whether an object should be cut now: the size trigger, or the oldest waiting byte has
    /// waited an upload interval.
    pub fn is_ready(&self) -> bool {
        if self.waiting_bytes == 0 {
            return false;
        }
        self.waiting_bytes >= self.config.upload_max_bytes
            || self
                .next_deadline_ms()
                .is_some_and(|d| self.clock.now_ms() >= d)
    }

    /// When the interval trigger fires next (`None` when nothing waits).
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.oldest_waiting_ms
            .map(|t| t.saturating_add(self.config.upload_interval_ms))
    }

    /// Cuts an object if a trigger has fired.
    pub fn poll_cut(&mut self) -> Result<Option<PendingObject>> {
        if self.is_ready() {
            self.cut()
        } else {
            Ok(None)
        }
    }

    /// Cuts everything waiting into one object, triggers or not (`None` when nothing waits).
    pub fn cut(&mut self) -> Result<Option<PendingObject>> {
        if self.waiting.is_empty() {
            return Ok(None);
        }
        let waiting = std::mem::take(&mut self.waiting);
        let bytes = std::mem::replace(&mut self.waiting_bytes, 0);
        let runs = std::mem::replace(&mut self.waiting_runs, 0);
        self.oldest_waiting_ms = None;
        let oldest_append = self
            .oldest_waiting_at
            .take()
            .unwrap_or_else(tokio::time::Instant::now);
        let seq = self.next_seq;
        self.next_seq += 1;
        let created_ms = self.clock.now_ms().max(self.last_created_ms).max(0);
        self.last_created_ms = created_ms;

        let mut builder = ObjectBuilder::with_capacity(bytes, runs);
        let mut slices = Vec::with_capacity(runs);
        let mut failure = None;
        for (wp, buf) in &waiting {
            for run in &buf.runs {
                let info = SliceInfo {
                    topic_id: wp.topic_id,
                    partition: wp.partition,
                    base_offset: run.base_offset,
                    last_offset: run.last_offset,
                    leader_epoch: run.leader_epoch,
                };
                match builder.append_chunks(info, &run.chunks) {
                    Ok(entry) => slices.push(PendingSlice {
                        tp: buf.tp.clone(),
                        entry: *entry,
                    }),
                    Err(e) => failure = Some(e),
                }
            }
        }
        let key = WalObjectKey::new(self.config.broker_id, created_ms, seq).ok_or_else(|| {
            WalError::Invalid(format!(
                "no WAL object key for broker {} at {created_ms} ms, seq {seq}",
                self.config.broker_id
            ))
        });
        let built = match (failure, key) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(key)) => builder.finish().map(|data| (key, data)),
        };
        match built {
            Ok((key, data)) => {
                self.in_flight_bytes += bytes;
                Ok(Some(PendingObject {
                    seq,
                    key,
                    data,
                    slices,
                    buffered_bytes: bytes,
                    oldest_append,
                }))
            }
            Err(e) => {
                // Appends are validated on entry, so this is a bug; still lose nothing silently.
                for (wp, buf) in &waiting {
                    for run in &buf.runs {
                        push_fallback(
                            &mut self.fallbacks,
                            ClassicFallback {
                                tp: buf.tp.clone(),
                                topic_id: wp.topic_id,
                                from_offset: run.base_offset,
                                end_offset: run.last_offset + 1,
                                reason: FallbackReason::UploadFailed,
                            },
                        );
                    }
                }
                Err(e)
            }
        }
    }

    /// Hands back the bytes of an object whose PUT has finished (either way).
    pub fn release(&mut self, bytes: usize) {
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(bytes);
    }

    /// Waiting plus in-flight slice bytes; never above `max_buffered_bytes`.
    pub fn buffered_bytes(&self) -> usize {
        self.waiting_bytes + self.in_flight_bytes
    }

    pub fn waiting_bytes(&self) -> usize {
        self.waiting_bytes
    }

    /// Ranges dropped from the WAL path since the last call.
    pub fn take_fallbacks(&mut self) -> Vec<ClassicFallback> {
        std::mem::take(&mut self.fallbacks)
    }
}

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
    /// Serialises "collect released records + publish", so publish calls keep their order.
    publish_lock: tokio::sync::Mutex<()>,
    store: Arc<dyn ObjectStore>,
    publisher: Arc<dyn MetadataPublisher>,
    clock: SharedClock,
    permits: Arc<Semaphore>,
    max_in_flight: u32,
    fallbacks: Mutex<Vec<ClassicFallback>>,
    wake: Notify,
    stages: StageMetrics,
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
                publish_lock: tokio::sync::Mutex::new(()),
                store,
                publisher,
                clock,
                permits: Arc::new(Semaphore::new(max_in_flight as usize)),
                max_in_flight,
                fallbacks: Mutex::new(Vec::new()),
                wake: Notify::new(),
                stages: config.stages,
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

async fn put_object(store: &dyn ObjectStore, key: &str, data: Bytes) -> Result<()> {
    let size = data.len() as u64;
    match store.put_if_absent(key, data).await? {
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
        Ok(()) => UploadResult::Uploaded {
            bucket: inner.store.bucket().to_owned(),
            upload_time_ms: inner.clock.now_ms(),
        },
        Err(e) => {
            tracing::warn!(%key, error = %e, "remote WAL upload failed; its ranges take the classic path");
            UploadResult::Failed(FallbackReason::UploadFailed)
        }
    };
    {
        let _order = inner.publish_lock.lock().await;
        let released = lock(&inner.sequencer).complete(seq, result);
        let mut fallbacks = released.fallbacks;
        if !released.publish.is_empty() {
            let records: Vec<WalSliceMetadata> =
                released.publish.iter().map(|(_, m)| m.clone()).collect();
            let published = inner.publisher.publish(records).await;
            inner.stages.observe(Stage::Publish, put_done.elapsed());
            if let Err(e) = published {
                tracing::warn!(%key, error = %e, "remote WAL metadata publish failed; ranges take the classic path");
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
