//! Batching triggers, bounded memory, and per-partition publish order under out-of-order
//! completion and store failure.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use ferry_common::ManualClock;
use ferry_objstore::{FaultKind, FaultyStore, MemoryStore, ObjectMeta, Op};
use tokio::sync::oneshot;

use super::*;

use ferry_common::TopicPartition;
use ferry_objstore::keys::WalObjectKey;
use uuid::Uuid;

use crate::format::ObjectReader;
use crate::format::{ObjectBuilder, SliceInfo};
use crate::sequencer::Released;

fn tid(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

fn append(t: u8, p: i32, base: i64, n: i64, len: usize) -> WalAppend {
    WalAppend {
        tp: TopicPartition::new(format!("t{t}"), p),
        topic_id: tid(t),
        base_offset: base,
        last_offset: base + n - 1,
        leader_epoch: 3,
        records: Bytes::from(vec![(base as u8) ^ t ^ (p as u8); len]),
    }
}

fn config(interval: i64, max_bytes: usize, max_buffered: usize) -> BatcherConfig {
    BatcherConfig {
        broker_id: 2,
        upload_interval_ms: interval,
        upload_max_bytes: max_bytes,
        max_buffered_bytes: max_buffered,
    }
}

#[test]
fn many_partitions_go_into_one_object_one_slice_each() {
    let clock = ManualClock::new(1_000);
    let mut b = UploadBatcher::new(config(10, 1 << 20, 1 << 20), clock.clone());
    for round in 0..3 {
        for t in 1..=3u8 {
            for p in 0..10 {
                let out = b.append(append(t, p, round * 5, 5, 50));
                assert_eq!(out, AppendOutcome::Buffered);
            }
        }
    }
    let obj = b.cut().unwrap().unwrap();
    assert_eq!(
        obj.slices.len(),
        30,
        "consecutive appends of a partition join one slice"
    );
    let reader = ObjectReader::parse(&obj.data.to_bytes()).unwrap();
    for (i, s) in obj.slices.iter().enumerate() {
        assert_eq!(reader.entries()[i], s.entry);
        assert_eq!(
            (s.entry.info.base_offset, s.entry.info.last_offset),
            (0, 14)
        );
        let bytes = reader.slice(i).unwrap();
        assert_eq!(bytes.len(), 150);
    }
    assert_eq!(obj.key.to_string(), "wal/2/0000000001000-0000000000.wal");
    assert_eq!(b.buffered_bytes(), 30 * 150, "in flight until released");
    b.release(obj.buffered_bytes);
    assert_eq!(b.buffered_bytes(), 0);
    assert!(b.cut().unwrap().is_none());
}

#[test]
fn interval_trigger_fires_after_upload_interval_of_the_oldest_byte() {
    let clock = ManualClock::new(0);
    let mut b = UploadBatcher::new(config(10, 1 << 20, 1 << 20), clock.clone());
    assert!(b.poll_cut().unwrap().is_none());
    b.append(append(1, 0, 0, 1, 10));
    clock.advance(6);
    b.append(append(1, 1, 0, 1, 10));
    assert_eq!(b.next_deadline_ms(), Some(10));
    clock.advance(3);
    assert!(
        b.poll_cut().unwrap().is_none(),
        "9 ms after the first append"
    );
    clock.advance(1);
    let obj = b.poll_cut().unwrap().expect("10 ms after the first append");
    assert_eq!(obj.slices.len(), 2);
    assert_eq!(b.next_deadline_ms(), None);
}

#[test]
fn size_trigger_fires_without_time_passing() {
    let clock = ManualClock::new(0);
    let mut b = UploadBatcher::new(config(10, 1_000, 1 << 20), clock.clone());
    b.append(append(1, 0, 0, 1, 600));
    assert!(!b.is_ready());
    b.append(append(1, 1, 0, 1, 500));
    assert!(b.is_ready());
    let obj = b.poll_cut().unwrap().unwrap();
    assert_eq!(
        obj.buffered_bytes, 1_100,
        "at most upload_max_bytes plus one append"
    );
}

#[test]
fn gap_or_epoch_change_splits_a_partition_into_slices() {
    let clock = ManualClock::new(0);
    let mut b = UploadBatcher::new(config(10, 1 << 20, 1 << 20), clock);
    b.append(append(1, 0, 0, 5, 10));
    b.append(append(1, 0, 8, 2, 10)); // gap 5..8
    let mut e = append(1, 0, 10, 1, 10);
    e.leader_epoch = 4;
    b.append(e);
    let obj = b.cut().unwrap().unwrap();
    let ranges: Vec<_> = obj
        .slices
        .iter()
        .map(|s| {
            (
                s.entry.info.base_offset,
                s.entry.info.last_offset,
                s.entry.info.leader_epoch,
            )
        })
        .collect();
    assert_eq!(ranges, vec![(0, 4, 3), (8, 9, 3), (10, 10, 4)]);
}

#[test]
fn memory_is_bounded_and_overflow_takes_the_classic_path() {
    let clock = ManualClock::new(0);
    let mut b = UploadBatcher::new(config(10, 1 << 20, 1_000), clock);
    assert_eq!(b.append(append(1, 0, 0, 10, 600)), AppendOutcome::Buffered);
    let obj = b.cut().unwrap().unwrap(); // in flight, still counted
    assert_eq!(
        b.append(append(1, 0, 10, 10, 500)),
        AppendOutcome::Dropped { classic_from: 10 }
    );
    assert_eq!(
        b.append(append(1, 0, 20, 5, 500)),
        AppendOutcome::Dropped { classic_from: 20 }
    );
    assert!(b.buffered_bytes() <= 1_000);
    let f = b.take_fallbacks();
    assert_eq!(f.len(), 1, "contiguous drops coalesce: {f:?}");
    assert_eq!((f[0].from_offset, f[0].end_offset), (10, 25));
    assert_eq!(f[0].reason, FallbackReason::BufferFull);
    b.release(obj.buffered_bytes);
    assert_eq!(b.append(append(1, 0, 25, 5, 500)), AppendOutcome::Buffered);
}

#[test]
fn keys_stay_unique_and_sorted_when_the_clock_steps_back() {
    let clock = ManualClock::new(5_000);
    let mut b = UploadBatcher::new(config(10, 1 << 20, 1 << 20), clock.clone());
    b.append(append(1, 0, 0, 1, 1));
    let k1 = b.cut().unwrap().unwrap().key;
    clock.set(4_000);
    b.append(append(1, 0, 1, 1, 1));
    let k2 = b.cut().unwrap().unwrap().key;
    assert!(k1.to_string() < k2.to_string());
    assert_eq!(k2.created_ms, 5_000);
}

fn pending(seq: u64, parts: &[(u8, i32, i64, i64)]) -> PendingObject {
    let mut builder = ObjectBuilder::with_capacity(parts.len());
    let mut slices = Vec::new();
    for &(t, p, base, last) in parts {
        let info = SliceInfo {
            topic_id: tid(t),
            partition: p,
            base_offset: base,
            last_offset: last,
            leader_epoch: 1,
        };
        let entry = *builder.append(info, b"batch").unwrap();
        slices.push(PendingSlice {
            tp: TopicPartition::new(format!("t{t}"), p),
            entry,
        });
    }
    PendingObject {
        seq,
        key: WalObjectKey::new(1, 0, seq).unwrap(),
        data: builder.finish_body().unwrap(),
        slices,
        buffered_bytes: 5 * parts.len(),
        oldest_append: tokio::time::Instant::now(),
    }
}

fn ok() -> UploadResult {
    UploadResult::Uploaded {
        bucket: "b".into(),
        upload_time_ms: 0,
    }
}

fn published(r: &Released) -> Vec<(i32, i64)> {
    r.publish
        .iter()
        .map(|(_, m)| (m.partition, m.base_offset))
        .collect()
}

#[test]
fn sequencer_holds_a_fast_upload_behind_a_slow_earlier_one_of_the_same_partition() {
    let mut s = PublishSequencer::new(1);
    let a = pending(0, &[(1, 1, 0, 9), (1, 2, 0, 9)]);
    let b = pending(1, &[(1, 1, 10, 19), (1, 3, 0, 9)]);
    s.register(&a);
    s.register(&b);
    let r = s.complete(1, ok());
    assert_eq!(published(&r), vec![(3, 0)], "partition 3 is not held up");
    let r = s.complete(0, ok());
    assert_eq!(published(&r), vec![(1, 0), (1, 10), (2, 0)]);
    assert_eq!(s.pending_objects(), 0);
}

#[test]
fn sequencer_turns_a_failed_upload_into_a_gap_and_later_objects_still_publish() {
    let mut s = PublishSequencer::new(1);
    s.register(&pending(0, &[(1, 1, 0, 9)]));
    s.register(&pending(1, &[(1, 1, 10, 19)]));
    s.register(&pending(2, &[(1, 1, 20, 29)]));
    let r = s.complete(2, ok());
    assert!(r.publish.is_empty());
    let r = s.complete(0, UploadResult::Failed(FallbackReason::UploadFailed));
    assert!(r.publish.is_empty(), "object 1 has not resolved yet");
    assert_eq!(r.fallbacks.len(), 1);
    assert_eq!(
        (r.fallbacks[0].from_offset, r.fallbacks[0].end_offset),
        (0, 10)
    );
    let r = s.complete(1, ok());
    assert_eq!(published(&r), vec![(1, 10), (1, 20)]);
}

/// Records every publish call.
#[derive(Debug, Default)]
struct RecordingPublisher {
    calls: Mutex<Vec<Vec<WalSliceMetadata>>>,
    fail: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl MetadataPublisher for RecordingPublisher {
    async fn publish(&self, records: Vec<WalSliceMetadata>) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(WalError::Invalid("publisher down".into()));
        }
        lock(&self.calls).push(records);
        Ok(())
    }
}

impl RecordingPublisher {
    fn all(&self) -> Vec<WalSliceMetadata> {
        lock(&self.calls).iter().flatten().cloned().collect()
    }
}

fn uploader(
    store: Arc<dyn ObjectStore>,
    clock: Arc<ManualClock>,
    cfg: BatcherConfig,
    in_flight: usize,
) -> (Uploader, Arc<RecordingPublisher>) {
    let publisher = Arc::new(RecordingPublisher::default());
    let up = Uploader::new(
        UploaderConfig {
            batcher: cfg,
            max_in_flight: in_flight,
            ..UploaderConfig::default()
        },
        store,
        publisher.clone(),
        clock,
    );
    (up, publisher)
}

#[tokio::test]
async fn uploader_puts_one_object_and_publishes_verifiable_metadata() {
    let clock = ManualClock::new(1_000);
    let store = MemoryStore::new();
    let (up, publisher) = uploader(
        Arc::new(store.clone()),
        clock.clone(),
        config(10, 1 << 20, 1 << 20),
        2,
    );
    for t in 1..=2u8 {
        for p in 0..6 {
            up.append(append(t, p, 0, 4, 100));
        }
    }
    assert_eq!(up.tick().unwrap(), 0, "no trigger yet");
    clock.advance(10);
    assert_eq!(up.tick().unwrap(), 1);
    up.wait_idle().await;
    assert_eq!(store.len(), 1);
    let records = publisher.all();
    assert_eq!(records.len(), 12);
    for m in &records {
        let bytes = store
            .get_range(&m.object_key, m.byte_range())
            .await
            .unwrap();
        assert_eq!(crc32c::crc32c(&bytes), m.slice_crc);
        assert_eq!(m.bucket, "memory");
        assert_eq!(m.uploader_broker_id, 2);
        assert_eq!(m.upload_time_ms, 1_010);
        assert_eq!(bytes.len(), 100);
    }
    assert_eq!(up.buffered_bytes(), 0);
    assert!(up.take_fallbacks().is_empty());
    assert_eq!(up.pending_objects(), 0);
}

/// A store whose n-th put waits until the test opens gate n.
#[derive(Debug)]
struct GatedStore {
    inner: MemoryStore,
    gates: Mutex<Vec<Option<oneshot::Receiver<()>>>>,
    calls: AtomicUsize,
}

impl GatedStore {
    fn new(n: usize) -> (Arc<Self>, Vec<oneshot::Sender<()>>) {
        let (tx, rx): (Vec<_>, Vec<_>) = (0..n).map(|_| oneshot::channel()).unzip();
        let store = Arc::new(Self {
            inner: MemoryStore::new(),
            gates: Mutex::new(rx.into_iter().map(Some).collect()),
            calls: AtomicUsize::new(0),
        });
        (store, tx)
    }
}

#[async_trait]
impl ObjectStore for GatedStore {
    async fn put(&self, key: &str, data: Bytes) -> ferry_objstore::Result<()> {
        self.inner.put(key, data).await
    }
    async fn put_if_absent(&self, key: &str, data: Bytes) -> ferry_objstore::Result<PutOutcome> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let gate = lock(&self.gates).get_mut(n).and_then(Option::take);
        if let Some(gate) = gate {
            let _ = gate.await;
        }
        self.inner.put_if_absent(key, data).await
    }
    async fn get(&self, key: &str) -> ferry_objstore::Result<Bytes> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> ferry_objstore::Result<Bytes> {
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> ferry_objstore::Result<Option<ObjectMeta>> {
        self.inner.head(key).await
    }
    async fn list(&self, prefix: &str) -> ferry_objstore::Result<Vec<ObjectMeta>> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> ferry_objstore::Result<()> {
        self.inner.delete(key).await
    }
    fn bucket(&self) -> &str {
        "gated"
    }
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn publish_is_in_offset_order_per_partition_when_uploads_complete_out_of_order() {
    let clock = ManualClock::new(0);
    let (store, mut gates) = GatedStore::new(2);
    let (up, publisher) = uploader(
        store.clone(),
        clock.clone(),
        config(10, 1 << 20, 1 << 20),
        2,
    );
    up.append(append(1, 0, 0, 10, 100));
    up.append(append(1, 1, 0, 10, 100));
    clock.advance(10);
    assert_eq!(up.tick().unwrap(), 1); // object 0: p0 0..9, p1 0..9
    up.append(append(1, 0, 10, 10, 100));
    up.append(append(1, 2, 0, 10, 100));
    clock.advance(10);
    assert_eq!(up.tick().unwrap(), 1); // object 1: p0 10..19, p2 0..9
    settle().await;
    let second = gates.pop().unwrap();
    let first = gates.pop().unwrap();
    second.send(()).unwrap();
    settle().await;
    let early: Vec<_> = publisher
        .all()
        .iter()
        .map(|m| (m.partition, m.base_offset))
        .collect();
    assert_eq!(early, vec![(2, 0)], "p0's second slice waits for its first");
    first.send(()).unwrap();
    up.wait_idle().await;
    let all: Vec<_> = publisher
        .all()
        .iter()
        .map(|m| (m.partition, m.base_offset))
        .collect();
    assert_eq!(all, vec![(2, 0), (0, 0), (0, 10), (1, 0)]);
}

/// Records every publish call; the first waits until the test opens the gate.
#[derive(Debug)]
struct GatedPublisher {
    calls: Mutex<Vec<Vec<WalSliceMetadata>>>,
    gate: tokio::sync::Semaphore,
}

#[async_trait]
impl MetadataPublisher for GatedPublisher {
    async fn publish(&self, records: Vec<WalSliceMetadata>) -> Result<()> {
        if let Ok(permit) = self.gate.acquire().await {
            permit.forget();
        }
        lock(&self.calls).push(records);
        Ok(())
    }
}

/// On a loaded cluster a publish waits for metadata leaders on other brokers. The objects whose
/// PUTs finish meanwhile are published together by the next call, not one call each behind
/// each other.
#[tokio::test]
async fn objects_uploaded_while_a_publish_runs_are_published_together_by_the_next() {
    let clock = ManualClock::new(0);
    let publisher = Arc::new(GatedPublisher {
        calls: Mutex::new(Vec::new()),
        gate: tokio::sync::Semaphore::new(0),
    });
    let up = Uploader::new(
        UploaderConfig {
            batcher: config(10, 1 << 20, 1 << 20),
            max_in_flight: 4,
            ..UploaderConfig::default()
        },
        Arc::new(MemoryStore::new()),
        publisher.clone(),
        clock.clone(),
    );
    for p in 0..3 {
        up.append(append(1, p, 0, 10, 100));
        clock.advance(10);
        assert_eq!(up.tick().unwrap(), 1, "object {p}");
        settle().await;
    }
    // The first publish (object 0) waits; objects 1 and 2 are uploaded meanwhile.
    publisher.gate.add_permits(1_000);
    up.wait_idle().await;
    let calls: Vec<Vec<i32>> = lock(&publisher.calls)
        .iter()
        .map(|c| c.iter().map(|m| m.partition).collect())
        .collect();
    assert_eq!(calls, vec![vec![0], vec![1, 2]]);
}

#[tokio::test]
async fn failed_upload_reports_classic_fallback_and_later_objects_publish() {
    let clock = ManualClock::new(0);
    let faulty = FaultyStore::new(MemoryStore::new(), 7);
    let faults = faulty.controller();
    let (up, publisher) = uploader(
        Arc::new(faulty),
        clock.clone(),
        config(10, 1 << 20, 1 << 20),
        1,
    );
    faults.fail_next(Op::PutIfAbsent, 1, FaultKind::Other);
    up.append(append(1, 0, 0, 10, 100));
    up.flush().await.unwrap();
    up.append(append(1, 0, 10, 10, 100));
    up.flush().await.unwrap();
    let fb = up.take_fallbacks();
    assert_eq!(fb.len(), 1);
    assert_eq!(
        (fb[0].from_offset, fb[0].end_offset, fb[0].reason),
        (0, 10, FallbackReason::UploadFailed)
    );
    let all: Vec<_> = publisher.all().iter().map(|m| m.base_offset).collect();
    assert_eq!(
        all,
        vec![10],
        "the partition continues on the WAL path after the gap"
    );
    assert_eq!(
        up.buffered_bytes(),
        0,
        "a failed object's memory is released"
    );
}

#[tokio::test(start_paused = true)]
async fn store_outage_never_blocks_appends_and_memory_stays_bounded() {
    let clock = ManualClock::new(0);
    let faulty = FaultyStore::new(MemoryStore::new(), 7);
    let faults = faulty.controller();
    faults.set_latency(Op::PutIfAbsent, Duration::from_secs(30));
    faults.set_unavailable(false);
    let (up, publisher) = uploader(Arc::new(faulty), clock.clone(), config(10, 1_000, 3_000), 2);
    let mut dropped = 0;
    for i in 0..100 {
        if let AppendOutcome::Dropped { .. } = up.append(append(1, 0, i * 10, 10, 500)) {
            dropped += 1;
        }
        up.tick().unwrap();
        assert!(up.buffered_bytes() <= 3_000);
    }
    assert!(dropped >= 90, "{dropped} appends dropped");
    let fb = up.take_fallbacks();
    assert!(fb.iter().all(|f| f.reason == FallbackReason::BufferFull));
    // The slow PUTs finish (tokio time is paused, so this is instant); memory comes back and the
    // WAL path resumes by itself.
    up.flush().await.unwrap();
    assert_eq!(up.buffered_bytes(), 0);
    faults.set_latency(Op::PutIfAbsent, Duration::ZERO);
    assert_eq!(
        up.append(append(1, 0, 1_000, 10, 500)),
        AppendOutcome::Buffered
    );
    up.flush().await.unwrap();
    let last = publisher.all().last().cloned().unwrap();
    assert_eq!(last.base_offset, 1_000);
}

#[tokio::test]
async fn publisher_failure_becomes_a_classic_fallback() {
    let clock = ManualClock::new(0);
    let (up, publisher) = uploader(
        Arc::new(MemoryStore::new()),
        clock,
        config(10, 1 << 20, 1 << 20),
        1,
    );
    publisher.fail.store(true, Ordering::SeqCst);
    up.append(append(1, 0, 0, 10, 100));
    up.flush().await.unwrap();
    let fb = up.take_fallbacks();
    assert_eq!(fb.len(), 1);
    assert_eq!(fb[0].reason, FallbackReason::PublishFailed);
}

#[tokio::test(start_paused = true)]
async fn run_loop_cuts_on_the_size_trigger_and_flushes_on_shutdown() {
    let clock = ManualClock::new(0);
    let store = MemoryStore::new();
    let (up, publisher) = uploader(
        Arc::new(store.clone()),
        clock,
        config(1_000_000, 1_000, 1 << 20),
        2,
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let runner = {
        let up = up.clone();
        tokio::spawn(async move {
            up.run(async {
                let _ = stopped.await;
            })
            .await
        })
    };
    up.append(append(1, 0, 0, 10, 1_200));
    settle().await;
    up.wait_idle().await;
    assert_eq!(publisher.all().len(), 1, "size trigger woke the loop");
    up.append(append(1, 0, 10, 10, 10));
    stop.send(()).unwrap();
    runner.await.unwrap();
    assert_eq!(publisher.all().len(), 2, "shutdown flushed the rest");
    assert_eq!(store.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_store_outage_is_logged_when_it_starts_every_few_seconds_and_when_it_ends() {
    let lines = crate::log_capture::LogLines::default();
    let _capture = lines.capture();
    let faulty = FaultyStore::new(MemoryStore::new(), 7);
    let faults = faulty.controller();
    let (up, publisher) = uploader(
        Arc::new(faulty),
        ManualClock::new(0),
        config(10, 1 << 20, 1 << 20),
        1,
    );
    faults.set_unavailable(true);
    // 120 failed uploads over 12 s: a line at the first, one 10 s later with the 99 between.
    for i in 0..120 {
        up.append(append(1, 0, i * 10, 10, 100));
        up.flush().await.unwrap();
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    faults.set_unavailable(false);
    up.append(append(1, 0, 1_200, 10, 100));
    up.flush().await.unwrap();
    assert!(
        !lines.text().contains("succeed again"),
        "one success right after a failure does not end the outage"
    );
    tokio::time::advance(FailureLog::EVERY).await;
    up.append(append(1, 0, 1_210, 10, 100));
    up.flush().await.unwrap();
    assert_eq!(
        publisher.all().len(),
        2,
        "the uploads after the outage publish"
    );
    let text = lines.text();
    assert_eq!(
        text.matches("remote WAL upload failed").count(),
        2,
        "120 failures, two lines:\n{text}"
    );
    assert!(text.contains("not_logged=0"), "{text}");
    assert!(text.contains("not_logged=99"), "{text}");
    assert_eq!(
        text.matches("remote WAL uploads succeed again").count(),
        1,
        "{text}"
    );
    assert!(text.contains("failures=120"), "{text}");
}
