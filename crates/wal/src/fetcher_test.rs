//! The fetcher against a MemoryStore and an in-memory follower log: coalesced GETs across
//! partitions, corrupt and missing objects, stale epochs, transient errors, restart.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use ferry_objstore::{FaultKind, FaultyStore, MemoryStore, ObjectMeta, Op, PutOutcome};

use super::*;

use crate::error::WalError;
use crate::format::{ObjectBuilder, SliceInfo};
use std::sync::Mutex;

fn tid() -> Uuid {
    Uuid::from_bytes([7; 16])
}

fn wp(p: i32) -> WalPartition {
    WalPartition {
        topic_id: tid(),
        partition: p,
    }
}

/// A v2 batch header (the fields `verify_slice` reads) plus 8 payload bytes.
fn batch(base: i64, last: i64, epoch: i32) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_i64(base);
    b.put_i32(49 + 8);
    b.put_i32(epoch);
    b.put_u8(2);
    b.put_u32(0);
    b.put_i16(0);
    b.put_i32((last - base) as i32);
    b.put_bytes(0, 61 - b.len());
    b.put_u64(base as u64);
    b.to_vec()
}

/// Two batches covering `base..=last`.
fn slice_bytes(base: i64, last: i64, epoch: i32) -> Vec<u8> {
    let mid = base + (last - base) / 2;
    let mut v = batch(base, mid, epoch);
    if mid < last {
        v.extend(batch(mid + 1, last, epoch));
    }
    v
}

/// Builds an object of `(partition, base, last)` slices and returns it with its records.
fn object(key: &str, epoch: i32, slices: &[(i32, i64, i64)]) -> (Bytes, Vec<WalSliceMetadata>) {
    let mut b = ObjectBuilder::with_capacity(slices.len());
    let mut entries = Vec::new();
    for &(p, base, last) in slices {
        let info = SliceInfo {
            topic_id: tid(),
            partition: p,
            base_offset: base,
            last_offset: last,
            leader_epoch: epoch,
        };
        let e = *b
            .append(info, &slice_bytes(base, last, epoch))
            .expect("test slice");
        entries.push(e);
    }
    let data = b.finish().expect("test object");
    let records = entries
        .iter()
        .map(|e| WalSliceMetadata {
            bucket: "az1".into(),
            object_key: key.into(),
            byte_position: e.position,
            byte_length: e.length,
            topic_id: e.info.topic_id,
            partition: e.info.partition,
            base_offset: e.info.base_offset,
            last_offset: e.info.last_offset,
            leader_epoch: e.info.leader_epoch,
            slice_crc: e.crc,
            object_size: data.len() as u64,
            uploader_broker_id: 1,
            // Uploaded just now (the fetchers here run on the system clock).
            upload_time_ms: ferry_common::Clock::now_ms(&ferry_common::SystemClock),
        })
        .collect();
    (data, records)
}

fn upserts(records: &[WalSliceMetadata]) -> Vec<WalMetadataEvent> {
    records
        .iter()
        .cloned()
        .map(WalMetadataEvent::Upsert)
        .collect()
}

#[derive(Debug, Default)]
struct Log {
    leo: i64,
    epoch: i32,
    appended: Vec<(i64, i64)>,
}

/// An in-memory follower: checks that appends continue the log and records them.
#[derive(Debug, Default)]
struct MemSink {
    logs: Mutex<HashMap<WalPartition, Log>>,
}

impl MemSink {
    fn following(parts: &[i32], epoch: i32) -> Arc<Self> {
        let sink = Self::default();
        for &p in parts {
            lock(&sink.logs).insert(
                wp(p),
                Log {
                    epoch,
                    ..Log::default()
                },
            );
        }
        Arc::new(sink)
    }

    fn leo(&self, p: i32) -> i64 {
        lock(&self.logs).get(&wp(p)).map_or(-1, |l| l.leo)
    }

    fn appended(&self, p: i32) -> Vec<(i64, i64)> {
        lock(&self.logs)
            .get(&wp(p))
            .map(|l| l.appended.clone())
            .unwrap_or_default()
    }

    /// What the classic fetch would do.
    fn classic_append(&self, p: i32, until: i64) {
        if let Some(l) = lock(&self.logs).get_mut(&wp(p)) {
            l.appended.push((l.leo, until - 1));
            l.leo = until;
        }
    }
}

fn walk(records: &[u8]) -> Option<(i64, i64)> {
    let mut pos = 0;
    let mut first = None;
    let mut last = 0;
    while pos < records.len() {
        let b = records.get(pos..pos + 61)?;
        let base = i64::from_be_bytes(b[0..8].try_into().ok()?);
        let len = i32::from_be_bytes(b[8..12].try_into().ok()?) as usize;
        let delta = i32::from_be_bytes(b[23..27].try_into().ok()?);
        first.get_or_insert(base);
        last = base + i64::from(delta);
        pos += 12 + len;
    }
    first.map(|f| (f, last))
}

#[async_trait]
impl FollowerSink for MemSink {
    fn partition_state(&self, topic_id: Uuid, partition: i32) -> Option<FollowerPartition> {
        lock(&self.logs)
            .get(&WalPartition {
                topic_id,
                partition,
            })
            .map(|l| FollowerPartition {
                log_end_offset: l.leo,
                leader_epoch: l.epoch,
                log_validated: true,
            })
    }

    async fn append_as_follower(
        &self,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        records: SliceBytes,
    ) -> Result<()> {
        let mut logs = lock(&self.logs);
        let log = logs
            .get_mut(&WalPartition {
                topic_id,
                partition,
            })
            .ok_or_else(|| WalError::Append("not a follower".into()))?;
        if leader_epoch != log.epoch {
            return Err(WalError::Append(format!(
                "planned at epoch {leader_epoch}, the partition is at {}",
                log.epoch
            )));
        }
        let (first, last) = walk(&records.to_bytes())
            .ok_or_else(|| WalError::Append("unparsable batches".into()))?;
        if first != log.leo {
            return Err(WalError::Append(format!(
                "starts at {first}, log ends at {}",
                log.leo
            )));
        }
        log.appended.push((first, last));
        log.leo = last + 1;
        Ok(())
    }
}

/// Counts ranged GETs on top of any store.
#[derive(Debug)]
struct Counting<S> {
    inner: S,
    gets: AtomicUsize,
    ranges: Mutex<Vec<Range<u64>>>,
    /// Keys whose ranged GETs wait until the test opens their gate ([`Counting::gated`]).
    gates: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

impl<S> Counting<S> {
    fn new(inner: S) -> Arc<Self> {
        Self::gated(inner, &[])
    }

    fn gated(inner: S, gated: &[&str]) -> Arc<Self> {
        let gates = gated
            .iter()
            .map(|k| (k.to_string(), Arc::new(tokio::sync::Semaphore::new(0))))
            .collect();
        Arc::new(Self {
            inner,
            gets: AtomicUsize::new(0),
            ranges: Mutex::new(Vec::new()),
            gates: Mutex::new(gates),
        })
    }

    fn open(&self, key: &str) {
        if let Some(g) = lock(&self.gates).get(key) {
            g.add_permits(1_000);
        }
    }
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for Counting<S> {
    async fn put(&self, key: &str, data: Bytes) -> ferry_objstore::Result<()> {
        self.inner.put(key, data).await
    }
    async fn put_if_absent(&self, key: &str, data: Bytes) -> ferry_objstore::Result<PutOutcome> {
        self.inner.put_if_absent(key, data).await
    }
    async fn get(&self, key: &str) -> ferry_objstore::Result<Bytes> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> ferry_objstore::Result<Bytes> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        lock(&self.ranges).push(range.clone());
        let gate = lock(&self.gates).get(key).cloned();
        if let Some(gate) = gate {
            let _ = gate.acquire().await;
        }
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
        self.inner.bucket()
    }
}

fn fetcher(store: Arc<dyn ObjectStore>, sink: Arc<MemSink>) -> WalFetcher {
    fetcher_with(store, sink, FetcherConfig::default().whole_object_max_bytes)
}

/// A fetcher that GETs only the slices it knows of (no whole objects).
fn ranged_fetcher(store: Arc<dyn ObjectStore>, sink: Arc<MemSink>) -> WalFetcher {
    fetcher_with(store, sink, 0)
}

fn fetcher_with(
    store: Arc<dyn ObjectStore>,
    sink: Arc<MemSink>,
    whole_object_max_bytes: u64,
) -> WalFetcher {
    let config = FetcherConfig {
        max_gap_bytes: 0,
        whole_object_max_bytes,
        ..FetcherConfig::default()
    };
    fetcher_configured(store, sink, config)
}

/// A fetcher reading bucket `az1` from `store`.
fn fetcher_configured(
    store: Arc<dyn ObjectStore>,
    sink: Arc<MemSink>,
    config: FetcherConfig,
) -> WalFetcher {
    WalFetcher::with_config(
        Arc::new(move |bucket: &str| (bucket == "az1").then(|| store.clone())),
        sink,
        config,
    )
}

fn classic(p: i32, from: i64, until: i64) -> PartitionClassicFetch {
    PartitionClassicFetch {
        partition: wp(p),
        fetch: ClassicFetch { from, until },
    }
}

#[tokio::test]
async fn many_partitions_of_one_object_take_one_get_per_contiguous_run() {
    let mem = MemoryStore::new();
    let slices: Vec<(i32, i64, i64)> = (0..8).map(|p| (p, 0, 9 + i64::from(p))).collect();
    let (data, records) = object("wal/1/a.wal", 3, &slices);
    assert!(mem.put("wal/1/a.wal", data).await.is_ok());
    let store = Counting::new(mem);
    // Followed: 0,1,2 and 5,6 (this broker leads or does not host 3, 4 and 7).
    let sink = MemSink::following(&[0, 1, 2, 5, 6], 3);
    let f = ranged_fetcher(store.clone(), sink.clone());
    f.on_metadata(upserts(&records));
    assert_eq!(
        f.queued(),
        5,
        "records of partitions not followed are dropped"
    );

    let r = f.run_once().await;
    assert_eq!(r.gets, 2);
    assert_eq!(store.gets.load(Ordering::SeqCst), 2);
    let ranges = lock(&store.ranges).clone();
    let span = |a: usize, b: usize| records[a].byte_position..records[b].byte_range().end;
    assert!(
        ranges.contains(&span(0, 2)) && ranges.contains(&span(5, 6)),
        "{ranges:?}"
    );
    assert_eq!(r.slices_appended, 5);
    assert!(r.classic.is_empty());
    for p in [0, 1, 2, 5, 6] {
        assert_eq!(sink.leo(p), 10 + i64::from(p));
    }
    assert_eq!(f.queued(), 0);
    assert_eq!(f.run_once().await.gets, 0, "nothing left to do");
}

#[tokio::test]
async fn corrupt_slice_falls_back_to_the_classic_fetch_and_is_not_read_again() {
    let mem = MemoryStore::new();
    let (data, records) = object("wal/1/a.wal", 3, &[(0, 0, 9), (1, 0, 9), (2, 0, 9)]);
    let mut damaged = data.to_vec();
    damaged[records[1].byte_position as usize + 70] ^= 0xff;
    assert!(mem.put("wal/1/a.wal", Bytes::from(damaged)).await.is_ok());
    let store = Counting::new(mem);
    let sink = MemSink::following(&[0, 1, 2], 3);
    let f = fetcher(store.clone(), sink.clone());
    f.on_metadata(upserts(&records));

    let r = f.run_once().await;
    assert_eq!((r.gets, r.slices_appended, r.corrupt_slices), (1, 2, 1));
    assert_eq!(r.classic, vec![classic(1, 0, 10)]);
    assert_eq!((sink.leo(0), sink.leo(1), sink.leo(2)), (10, 0, 10));

    // Redelivered metadata for the bad slice is skipped without another GET.
    f.on_metadata(upserts(&records[1..2]));
    let r = f.run_once().await;
    assert_eq!(r.gets, 0);
    assert_eq!(store.gets.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn missing_object_is_skipped_and_the_wal_path_resumes_after_the_classic_gap() {
    let mem = MemoryStore::new();
    let (_, gone) = object("wal/1/gone.wal", 3, &[(0, 0, 9)]);
    let (data, later) = object("wal/1/b.wal", 3, &[(0, 10, 19)]);
    assert!(mem.put("wal/1/b.wal", data).await.is_ok());
    let sink = MemSink::following(&[0], 3);
    let f = fetcher(Arc::new(mem), sink.clone());
    f.on_metadata(upserts(&gone));
    f.on_metadata(upserts(&later));

    let r = f.run_once().await;
    assert_eq!(r.unreadable_objects, 1);
    assert_eq!(r.classic, vec![classic(0, 0, 10)]);
    assert_eq!(sink.leo(0), 0);

    let r = f.run_once().await;
    assert_eq!(r.gets, 0, "the unreadable object is not asked for again");
    assert_eq!(r.classic, vec![classic(0, 0, 10)], "the gap stays reported");

    sink.classic_append(0, 10);
    let r = f.run_once().await;
    // Downloaded in the first step already, and kept while the classic fetch filled the gap.
    assert_eq!((r.gets, r.slices_appended), (0, 1));
    assert!(r.classic.is_empty());
    assert_eq!(sink.appended(0), vec![(0, 9), (10, 19)]);
}

/// KIP-1176 failover: the former leader's object sits in a failed bucket; the new leader
/// republished the same range into its own. The follower skips the unreadable object and takes
/// the republished slice in the same round, with no classic fetch.
#[tokio::test]
async fn an_unreadable_object_is_replaced_by_a_republished_one_in_the_same_round() {
    let mem = MemoryStore::new();
    let (_, lost) = object("wal/1/lost.wal", 3, &[(0, 0, 9), (0, 10, 19)]);
    let (data, republished) = object("wal/2/republished.wal", 3, &[(0, 5, 14)]);
    assert!(mem.put("wal/2/republished.wal", data).await.is_ok());
    let sink = MemSink::following(&[0], 3);
    sink.classic_append(0, 5);
    let f = fetcher(Arc::new(mem), sink.clone());
    f.on_metadata(upserts(&lost));
    // Compaction keeps one record per base offset: the republished one is at 5, so both of
    // the lost records stay; the one at 0 is already covered.
    f.on_metadata(upserts(&republished));

    let r = f.run_once().await;
    assert_eq!(r.unreadable_objects, 1, "{r:?}");
    assert_eq!(sink.appended(0), vec![(0, 4), (5, 14)], "{r:?}");
    // What nothing else covers (15..=19, only in the lost object) goes classic.
    assert_eq!(r.classic, vec![classic(0, 15, 20)]);
}

#[tokio::test]
async fn stale_epoch_is_skipped_and_future_epoch_waits() {
    let mem = MemoryStore::new();
    let (old, stale) = object("wal/1/old.wal", 4, &[(0, 0, 9)]);
    let (new, current) = object("wal/2/new.wal", 5, &[(1, 0, 9)]);
    let (_, future) = object("wal/2/future.wal", 6, &[(2, 0, 9)]);
    assert!(mem.put("wal/1/old.wal", old).await.is_ok());
    assert!(mem.put("wal/2/new.wal", new).await.is_ok());
    let sink = MemSink::following(&[0, 1, 2], 5);
    let f = fetcher(Arc::new(mem), sink.clone());
    f.on_metadata(upserts(&stale));
    f.on_metadata(upserts(&current));
    f.on_metadata(upserts(&future));

    let r = f.run_once().await;
    assert_eq!((r.stale_skipped, r.gets, r.slices_appended), (1, 1, 1));
    assert_eq!((sink.leo(0), sink.leo(1), sink.leo(2)), (0, 10, 0));
    assert_eq!(f.queued(), 1, "the future-epoch record is kept for later");
}

/// After a leader change, the old leader's uploader can publish a record of the same base offset
/// (the metadata key) after the new leader's. It must not take the current record's place: the
/// plan skips it as stale, and the range would go to the classic fetch.
#[tokio::test]
async fn a_late_record_of_an_older_epoch_does_not_replace_the_current_one() {
    let mem = MemoryStore::new();
    let (new, current) = object("wal/3/new.wal", 5, &[(0, 0, 9)]);
    let (old, stale) = object("wal/1/old.wal", 4, &[(0, 0, 9)]);
    assert!(mem.put("wal/3/new.wal", new).await.is_ok());
    assert!(mem.put("wal/1/old.wal", old).await.is_ok());
    let sink = MemSink::following(&[0], 5);
    let f = fetcher(Arc::new(mem), sink.clone());
    f.on_metadata(upserts(&current));
    f.on_metadata(upserts(&stale));

    let r = f.run_once().await;
    assert_eq!(r.classic, vec![], "the current record was kept");
    assert_eq!((r.slices_appended, sink.leo(0)), (1, 10));
}

#[tokio::test]
async fn transient_store_error_keeps_the_record_and_reports_the_range_meanwhile() {
    let faulty = FaultyStore::new(MemoryStore::new(), 1);
    let faults = faulty.controller();
    let (data, records) = object("wal/1/a.wal", 3, &[(0, 0, 9)]);
    assert!(faulty.put("wal/1/a.wal", data).await.is_ok());
    let sink = MemSink::following(&[0], 3);
    let f = fetcher(Arc::new(faulty), sink.clone());
    f.on_metadata(upserts(&records));

    faults.fail_next(Op::GetRange, 1, FaultKind::Throttled);
    let r = f.run_once().await;
    assert_eq!((r.transient_errors, r.unreadable_objects), (1, 0));
    assert_eq!(r.classic, vec![classic(0, 0, 10)]);
    assert_eq!(f.queued(), 1);

    let r = f.run_once().await;
    assert_eq!(r.slices_appended, 1);
    assert_eq!(sink.leo(0), 10);
}

#[tokio::test]
async fn a_restarted_fetcher_resumes_at_the_log_end_without_gap_or_duplicate() {
    let mem = MemoryStore::new();
    let (a, first) = object("wal/1/a.wal", 3, &[(0, 0, 9), (1, 0, 4)]);
    let (b, second) = object("wal/1/b.wal", 3, &[(0, 10, 19), (1, 5, 9)]);
    assert!(mem.put("wal/1/a.wal", a).await.is_ok());
    assert!(mem.put("wal/1/b.wal", b).await.is_ok());
    let store = Counting::new(mem);
    let sink = MemSink::following(&[0, 1], 3);

    let before = fetcher(store.clone(), sink.clone());
    before.on_metadata(upserts(&first));
    assert_eq!(before.run_once().await.slices_appended, 2);
    drop(before);

    // Restart: a new fetcher replays the whole metadata topic.
    let after = fetcher(store.clone(), sink.clone());
    after.on_metadata(upserts(&first));
    after.on_metadata(upserts(&second));
    let r = after.run_once().await;
    assert_eq!((r.gets, r.slices_appended), (1, 2), "only object b is read");
    assert_eq!(sink.appended(0), vec![(0, 9), (10, 19)]);
    assert_eq!(sink.appended(1), vec![(0, 4), (5, 9)]);
    assert_eq!(store.gets.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn tombstone_and_replacing_upsert_act_like_compaction() {
    let sink = MemSink::following(&[0], 3);
    let f = fetcher(Arc::new(MemoryStore::new()), sink);
    let (_, old) = object("wal/1/a.wal", 3, &[(0, 0, 9)]);
    let (_, new) = object("wal/2/b.wal", 3, &[(0, 0, 9)]);
    f.on_metadata(upserts(&old));
    f.on_metadata(upserts(&new));
    assert_eq!(f.queued(), 1, "same key: the republished record replaces");
    f.on_metadata([WalMetadataEvent::Tombstone(new[0].key())]);
    assert_eq!(f.queued(), 0);
}

#[tokio::test(start_paused = true)]
async fn run_loop_wakes_on_metadata_and_reports_each_round() {
    let mem = MemoryStore::new();
    let (data, records) = object("wal/1/a.wal", 3, &[(0, 0, 9)]);
    assert!(mem.put("wal/1/a.wal", data).await.is_ok());
    let sink = MemSink::following(&[0], 3);
    let f = Arc::new(fetcher(Arc::new(mem), sink.clone()));
    let reports = Arc::new(Mutex::new(Vec::<FetchReport>::new()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = {
        let (f, reports) = (f.clone(), reports.clone());
        tokio::spawn(async move {
            f.run(
                std::time::Duration::from_secs(3_600),
                |r| lock(&reports).push(r),
                async move {
                    let _ = stopped.await;
                },
            )
            .await;
        })
    };
    tokio::task::yield_now().await;
    f.on_metadata(upserts(&records));
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    assert_eq!(
        sink.leo(0),
        10,
        "woken by metadata, long before the interval"
    );
    assert_eq!(
        lock(&reports)
            .iter()
            .map(|r| r.slices_appended)
            .sum::<usize>(),
        1
    );
    let _ = stop.send(());
    assert!(task.await.is_ok());
}

/// A new topic's first metadata can arrive before this broker applied the image that makes it a
/// follower: the records wait (parked) and are used once it follows, instead of leaving the
/// first slices to the classic fetch.
#[tokio::test]
async fn metadata_that_arrives_before_the_partition_is_followed_is_used_once_it_is() {
    let mem = MemoryStore::new();
    let (data, records) = object("wal/1/a.wal", 3, &[(0, 0, 9), (1, 0, 4)]);
    assert!(mem.put("wal/1/a.wal", data).await.is_ok());
    let sink = MemSink::following(&[0], 3);
    let f = fetcher(Arc::new(mem), sink.clone());
    f.on_metadata(upserts(&records));
    assert_eq!(f.queued(), 1, "partition 1 is not followed yet");
    let r = f.run_once().await;
    assert_eq!(r.slices_appended, 1);
    assert_eq!(sink.leo(1), -1);

    // The image arrives: this broker follows partition 1 now.
    lock(&sink.logs).insert(
        wp(1),
        Log {
            epoch: 3,
            ..Log::default()
        },
    );
    let r = f.run_once().await;
    assert_eq!(r.slices_appended, 1);
    assert!(r.classic.is_empty());
    assert_eq!(sink.leo(1), 5);
    assert_eq!(sink.appended(1), vec![(0, 4)]);
}

/// Issue 14: a broker restarted after a long outage replays the metadata of the objects kept
/// for it before it follows its partitions again; when more is parked than the cap, the oldest
/// (where its log ends) stay, so it catches up through the WAL from its log end and only the
/// newest part goes classic, not the other way round.
#[tokio::test]
async fn parked_metadata_beyond_the_cap_keeps_the_oldest() {
    let mem = MemoryStore::new();
    let records = one_slice_objects(&mem, 1, 3, 4).await;
    let sink = MemSink::following(&[], 3);
    let f = capped_fetcher(mem, sink.clone(), 3);
    f.on_metadata(upserts(&records));
    lock(&sink.logs).insert(
        wp(1),
        Log {
            epoch: 3,
            ..Log::default()
        },
    );
    let r = f.run_once().await;
    assert_eq!(sink.leo(1), 30, "{r:?}");
    assert_eq!(sink.appended(1), vec![(0, 9), (10, 19), (20, 29)]);
}

/// Runs the fetcher's loop (retry tick an hour away: nothing here may depend on a timer) until
/// the returned sender is used.
fn spawn_loop(f: &Arc<WalFetcher>) -> tokio::sync::oneshot::Sender<()> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let f = f.clone();
    tokio::spawn(async move {
        f.run(Duration::from_secs(3_600), |_| {}, async move {
            let _ = stopped.await;
        })
        .await;
    });
    stop
}

/// Lets every ready task run (the paused clock does not move).
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Metadata that arrives while another partition's GET hangs starts its own GET at once and is
/// appended: a slow GET holds back nothing but its own partition.
#[tokio::test(start_paused = true)]
async fn new_metadata_starts_a_get_while_an_earlier_one_is_in_flight() {
    let mem = MemoryStore::new();
    let (a, first) = object("wal/1/a.wal", 3, &[(0, 0, 9)]);
    let (b, second) = object("wal/1/b.wal", 3, &[(1, 0, 9)]);
    assert!(mem.put("wal/1/a.wal", a).await.is_ok());
    assert!(mem.put("wal/1/b.wal", b).await.is_ok());
    let store = Counting::gated(mem, &["wal/1/a.wal"]);
    let sink = MemSink::following(&[0, 1], 3);
    let f = Arc::new(fetcher(store.clone(), sink.clone()));
    let stop = spawn_loop(&f);
    let start = tokio::time::Instant::now();

    f.on_metadata(upserts(&first));
    settle().await;
    assert_eq!(store.gets.load(Ordering::SeqCst), 1, "a's GET runs");
    f.on_metadata(upserts(&second));
    settle().await;
    assert_eq!(store.gets.load(Ordering::SeqCst), 2, "b's GET did not wait");
    assert_eq!(
        (sink.leo(0), sink.leo(1)),
        (0, 10),
        "b appended, a still downloading"
    );

    store.open("wal/1/a.wal");
    settle().await;
    assert_eq!(sink.leo(0), 10);
    assert_eq!(start.elapsed(), Duration::ZERO, "no timer was waited for");
    let _ = stop.send(());
}

/// Several objects of one partition download at once; a later one that arrives first waits
/// for the earlier one and the log gets them in offset order.
#[tokio::test(start_paused = true)]
async fn objects_of_one_partition_download_together_and_append_in_order() {
    let mem = MemoryStore::new();
    let (a, first) = object("wal/1/a.wal", 3, &[(0, 0, 9)]);
    let (b, second) = object("wal/1/b.wal", 3, &[(0, 10, 19)]);
    assert!(mem.put("wal/1/a.wal", a).await.is_ok());
    assert!(mem.put("wal/1/b.wal", b).await.is_ok());
    let store = Counting::gated(mem, &["wal/1/a.wal", "wal/1/b.wal"]);
    let sink = MemSink::following(&[0], 3);
    let f = Arc::new(fetcher(store.clone(), sink.clone()));
    let stop = spawn_loop(&f);

    f.on_metadata(upserts(&first));
    settle().await;
    f.on_metadata(upserts(&second));
    settle().await;
    assert_eq!(store.gets.load(Ordering::SeqCst), 2, "both GETs in flight");

    store.open("wal/1/b.wal");
    settle().await;
    assert_eq!(sink.leo(0), 0, "b is held until a is appended");
    store.open("wal/1/a.wal");
    settle().await;
    assert_eq!(sink.appended(0), vec![(0, 9), (10, 19)]);
    assert_eq!(f.queued(), 0);
    let _ = stop.send(());
}

/// Downloaded-but-unappended bytes are bounded: behind a hanging GET, later slices of the
/// partition are not all started at once.
#[tokio::test(start_paused = true)]
async fn downloads_stop_at_the_byte_budget_behind_a_hanging_get() {
    let mem = MemoryStore::new();
    let mut keys = Vec::new();
    let mut all = Vec::new();
    for i in 0..6i64 {
        let key = format!("wal/1/{i}.wal");
        let (data, recs) = object(&key, 3, &[(0, i * 10, i * 10 + 9)]);
        assert!(mem.put(&key, data).await.is_ok());
        keys.push(key);
        all.extend(recs);
    }
    let store = Counting::gated(mem, &["wal/1/0.wal"]);
    let sink = MemSink::following(&[0], 3);
    let budget = 2 * u64::from(all[0].byte_length);
    let config = FetcherConfig {
        max_gap_bytes: 0,
        max_download_bytes: budget,
        ..FetcherConfig::default()
    };
    let s: Arc<dyn ObjectStore> = store.clone();
    let f = Arc::new(WalFetcher::with_config(
        Arc::new(move |_: &str| Some(s.clone())),
        sink.clone(),
        config,
    ));
    let stop = spawn_loop(&f);
    f.on_metadata(upserts(&all));
    settle().await;
    assert_eq!(
        store.gets.load(Ordering::SeqCst),
        2,
        "two slices fit the budget"
    );
    store.open("wal/1/0.wal");
    settle().await;
    assert_eq!(sink.leo(0), 60, "the rest followed as bytes were appended");
    let _ = stop.send(());
}

#[tokio::test]
async fn slices_whose_records_arrive_after_the_first_get_are_cut_from_the_whole_object() {
    let mem = MemoryStore::new();
    let slices: Vec<(i32, i64, i64)> = (0..4).map(|p| (p, 0, 9)).collect();
    let (data, records) = object("wal/1/a.wal", 3, &slices);
    let size = data.len() as u64;
    assert!(mem.put("wal/1/a.wal", data).await.is_ok());
    let store = Counting::new(mem);
    let sink = MemSink::following(&[0, 1, 2, 3], 3);
    let f = fetcher(store.clone(), sink.clone());

    // The records of one object come over several metadata partitions: partition 0's first.
    f.on_metadata(upserts(&records[..1]));
    let r = f.run_once().await;
    assert_eq!((r.gets, r.slices_appended), (1, 1));
    assert_eq!(
        lock(&store.ranges).clone(),
        vec![0..size],
        "the whole object"
    );

    f.on_metadata(upserts(&records[1..]));
    let r = f.run_once().await;
    assert_eq!(
        r.gets, 0,
        "no GET for slices of an object already downloaded"
    );
    assert_eq!((r.slices_from_kept_objects, r.slices_appended), (3, 3));
    assert!(r.classic.is_empty());
    for p in 0..4 {
        assert_eq!(sink.appended(p), vec![(0, 9)]);
    }
    assert_eq!(store.gets.load(Ordering::SeqCst), 1);
}

/// At full load more objects arrive than the kept objects' budget holds, and the records of an
/// object's later slices can come after it was let go. They get GETs of their own ranges: a
/// second GET of the whole object downloaded again what was appended (2.3-2.5x the uploaded
/// bytes in 7.7 GB cluster runs, against 2x).
#[tokio::test]
async fn a_late_slice_of_an_object_let_go_for_the_budget_gets_its_range_not_the_whole_object() {
    let mem = MemoryStore::new();
    let (a, a_records) = object("wal/1/a.wal", 3, &[(0, 0, 9), (1, 0, 9), (2, 0, 9)]);
    let (b, b_records) = object("wal/1/b.wal", 3, &[(0, 10, 19), (1, 10, 19)]);
    let (a_size, b_size) = (a.len() as u64, b.len() as u64);
    assert!(mem.put("wal/1/a.wal", a).await.is_ok());
    assert!(mem.put("wal/1/b.wal", b).await.is_ok());
    let store = Counting::new(mem);
    let sink = MemSink::following(&[0, 1, 2], 3);
    let config = FetcherConfig {
        max_gap_bytes: 0,
        // The kept objects' share of it holds one of these objects, not two.
        max_download_bytes: 4 * a_size.max(b_size) + 4,
        ..FetcherConfig::default()
    };
    let f = fetcher_configured(store.clone(), sink.clone(), config);

    f.on_metadata(upserts(&a_records[..2]));
    assert_eq!(f.run_once().await.slices_appended, 2);
    f.on_metadata(upserts(&b_records));
    assert_eq!(f.run_once().await.slices_appended, 2);
    // Object b pushed a out of the budget; then a's third slice is known.
    f.on_metadata(upserts(&a_records[2..]));
    let r = f.run_once().await;
    assert_eq!((r.gets, r.slices_appended), (1, 1), "{r:?}");
    assert_eq!(sink.appended(2), vec![(0, 9)]);
    assert_eq!(
        lock(&store.ranges).clone(),
        vec![0..a_size, 0..b_size, a_records[2].byte_range()],
        "a's last slice by its own range"
    );
}

#[tokio::test(start_paused = true)]
async fn records_that_arrive_while_the_whole_object_downloads_wait_for_it() {
    let mem = MemoryStore::new();
    let (data, records) = object("wal/1/a.wal", 3, &[(0, 0, 9), (1, 0, 9), (2, 0, 9)]);
    assert!(mem.put("wal/1/a.wal", data).await.is_ok());
    let store = Counting::gated(mem, &["wal/1/a.wal"]);
    let sink = MemSink::following(&[0, 1, 2], 3);
    let f = Arc::new(fetcher(store.clone(), sink.clone()));
    let stop = spawn_loop(&f);

    f.on_metadata(upserts(&records[..1]));
    settle().await;
    f.on_metadata(upserts(&records[1..]));
    settle().await;
    assert_eq!(
        store.gets.load(Ordering::SeqCst),
        1,
        "the later slices wait for the GET in flight"
    );
    store.open("wal/1/a.wal");
    settle().await;
    assert_eq!((sink.leo(0), sink.leo(1), sink.leo(2)), (10, 10, 10));
    assert_eq!(store.gets.load(Ordering::SeqCst), 1);
    let _ = stop.send(());
}

#[tokio::test(start_paused = true)]
async fn a_failed_whole_object_get_fails_the_slices_that_waited_for_it() {
    let (_, records) = object("wal/1/gone.wal", 3, &[(0, 0, 9), (1, 0, 9)]);
    // The object is not in the store (collected, or its bucket lost).
    let store = Counting::gated(MemoryStore::new(), &["wal/1/gone.wal"]);
    let sink = MemSink::following(&[0, 1], 3);
    let f = Arc::new(fetcher(store.clone(), sink.clone()));
    let reports = Arc::new(Mutex::new(Vec::new()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    {
        let (f, reports) = (f.clone(), reports.clone());
        tokio::spawn(async move {
            f.run(
                Duration::from_secs(3_600),
                |r| lock(&reports).push(r),
                async move {
                    let _ = stopped.await;
                },
            )
            .await;
        });
    }
    f.on_metadata(upserts(&records[..1]));
    settle().await;
    f.on_metadata(upserts(&records[1..]));
    settle().await;
    store.open("wal/1/gone.wal");
    settle().await;
    let ranges: Vec<PartitionClassicFetch> = lock(&reports)
        .iter()
        .flat_map(|r| r.classic.clone())
        .collect();
    assert!(
        ranges.contains(&classic(0, 0, 10)) && ranges.contains(&classic(1, 0, 10)),
        "both slices go to the classic fetch: {ranges:?}"
    );
    assert_eq!(store.gets.load(Ordering::SeqCst), 1);
    let _ = stop.send(());
}

/// `count` objects in `mem`, each one slice of `partition` at `epoch`, of ten records each from
/// offset 0 on; their metadata records in offset order.
async fn one_slice_objects(
    mem: &MemoryStore,
    partition: i32,
    epoch: i32,
    count: i64,
) -> Vec<WalSliceMetadata> {
    let mut records = Vec::new();
    for i in 0..count {
        let key = format!("wal/1/{partition}-{i}.wal");
        let (data, r) = object(&key, epoch, &[(partition, i * 10, i * 10 + 9)]);
        assert!(mem.put(&key, data).await.is_ok());
        records.extend(r);
    }
    records
}

/// A fetcher over `mem` ("az1") that queues at most `cap` records per partition.
fn capped_fetcher(mem: MemoryStore, sink: Arc<MemSink>, cap: usize) -> WalFetcher {
    let config = FetcherConfig {
        max_gap_bytes: 0,
        max_records_per_partition: cap,
        ..FetcherConfig::default()
    };
    let store: Arc<dyn ObjectStore> = Arc::new(mem);
    WalFetcher::with_config(
        Arc::new(move |bucket: &str| (bucket == "az1").then(|| store.clone())),
        sink,
        config,
    )
}

/// Metadata events at offsets `first..` of a metadata partition.
fn at_offsets(first: i64, records: &[WalSliceMetadata]) -> Vec<(i64, WalMetadataEvent)> {
    (first..).zip(upserts(records)).collect()
}

/// A follower back from an outage replays more metadata for a partition than its queue holds:
/// the fetcher takes what fits and asks for the rest to be read again once the follower
/// appended some, so the whole backlog comes through the WAL and no range goes to the classic
/// fetch (across zones). Before, the records beyond the cap were dropped.
#[tokio::test]
async fn a_backlog_larger_than_the_queue_is_taken_in_turns_without_a_classic_range() {
    let mem = MemoryStore::new();
    let records = one_slice_objects(&mem, 0, 3, 5).await;
    let sink = MemSink::following(&[0], 3);
    let f = capped_fetcher(mem, sink.clone(), 3);
    let events = at_offsets(0, &records);
    assert!(f.on_metadata_read(0, events.clone(), 0, 5).queue_full);
    assert_eq!(f.queued(), 3, "the queue holds three");
    assert_eq!(f.reread_from(0), None, "not before the queue has room");
    let r = f.run_once().await;
    assert_eq!(sink.leo(0), 30, "{r:?}");
    assert!(r.classic.is_empty(), "{r:?}");
    assert_eq!(f.reread_from(0), Some(3));
    assert!(!f.on_metadata_read(0, events[3..].to_vec(), 3, 5).queue_full);
    assert_eq!(f.reread_from(0), None, "all taken");
    let r = f.run_once().await;
    assert_eq!(sink.leo(0), 50, "{r:?}");
    assert!(r.classic.is_empty(), "{r:?}");
    assert_eq!(
        sink.appended(0),
        vec![(0, 9), (10, 19), (20, 29), (30, 39), (40, 49)]
    );
}

/// A full queue holds back its own partition only: the records of another partition in the
/// same metadata partition are taken as they come (a partition in the ISR must not wait behind
/// one catching up). A read again gives each partition only what it did not take, and a
/// partition behind takes nothing after a record it could not take (no hole).
#[tokio::test]
async fn a_full_queue_holds_back_only_its_own_partition() {
    let mem = MemoryStore::new();
    let behind = one_slice_objects(&mem, 0, 3, 4).await;
    let other = one_slice_objects(&mem, 1, 3, 2).await;
    let sink = MemSink::following(&[0, 1], 3);
    let f = capped_fetcher(mem, sink.clone(), 1);
    // Offsets in the metadata partition: 0 A0, 1 A1, 2 B0, 3 A2 (A: partition 0, B: 1).
    let mut events = at_offsets(0, &behind[..2]);
    events.extend(at_offsets(2, &other[..1]));
    events.extend(at_offsets(3, &behind[2..3]));
    assert!(f.on_metadata_read(0, events.clone(), 0, 4).queue_full);
    assert_eq!(f.queued(), 2, "A0 and B0");
    assert_eq!(f.partitions_awaiting_reread(), 1);
    f.run_once().await;
    assert_eq!((sink.leo(0), sink.leo(1)), (10, 10));

    // New records: 4 A3, 5 B1. B1 is taken; A3 is not (A1 and A2 are not yet).
    let new = [at_offsets(4, &behind[3..]), at_offsets(5, &other[1..])].concat();
    f.on_metadata_read(0, new.clone(), 4, 6);
    f.run_once().await;
    assert_eq!((sink.leo(0), sink.leo(1)), (10, 20));

    // Read again from A1, one record a turn: B's records are not taken twice.
    let all: Vec<(i64, WalMetadataEvent)> = [events, new].concat();
    let mut turns = Vec::new();
    while let Some(from) = f.reread_from(0) {
        turns.push(from);
        let again = usize::try_from(from).expect("offset");
        f.on_metadata_read(0, all[again..].to_vec(), from, 6);
        let r = f.run_once().await;
        assert!(r.classic.is_empty(), "{r:?}");
        assert!(turns.len() < 10, "{turns:?}");
    }
    assert_eq!(turns, vec![1, 3, 4]);
    assert_eq!(f.partitions_awaiting_reread(), 0);
    assert_eq!(sink.appended(0), vec![(0, 9), (10, 19), (20, 29), (30, 39)]);
    assert_eq!(sink.appended(1), vec![(0, 9), (10, 19)]);
}

/// When the metadata partition's log start moved past what a partition behind wanted to read
/// again, it reads on from there (what it missed goes to the classic fetch).
#[tokio::test]
async fn metadata_gone_below_the_log_start_is_not_waited_for() {
    // Three one-slice objects of partition 0 at metadata offsets 0-2, a queue of one: the
    // first is appended, the other two wait to be read again from offset 1.
    let behind_from_1 = || async {
        let mem = MemoryStore::new();
        let records = one_slice_objects(&mem, 0, 3, 3).await;
        let sink = MemSink::following(&[0], 3);
        let f = capped_fetcher(mem, sink, 1);
        f.on_metadata_read(0, at_offsets(0, &records), 0, 3);
        f.run_once().await;
        assert_eq!(f.reread_from(0), Some(1));
        (f, records)
    };
    let (f, _) = behind_from_1().await;
    f.metadata_gone_below(0, 3);
    assert_eq!(f.reread_from(0), None);
    let r = f.run_once().await;
    assert_eq!(r.classic.len(), 0, "nothing queued: {r:?}");

    // A read again from below the start says so too: the partition takes what is left, and
    // the range it missed goes to the classic fetch.
    let (f, records) = behind_from_1().await;
    f.on_metadata_read(0, at_offsets(2, &records[2..]), 1, 3);
    assert_eq!(f.reread_from(0), None);
    let r = f.run_once().await;
    assert_eq!(
        r.classic.iter().map(|c| c.fetch).collect::<Vec<_>>(),
        vec![ClassicFetch {
            from: 10,
            until: 20
        }],
        "{r:?}"
    );
}

/// A backlog's objects (uploaded long ago) are read by ranges of the slices the follower needs,
/// not whole: their partitions reach them at their own pace, after a kept copy is gone, and whole
/// GETs downloaded each object several times in a catch-up. A fresh object is read whole.
#[tokio::test]
async fn an_old_object_is_read_by_its_slices_and_a_fresh_one_whole() {
    for (age_ms, whole) in [(3_600_000, false), (0, true)] {
        let mem = MemoryStore::new();
        let (data, mut records) = object("wal/1/a.wal", 3, &[(0, 0, 9), (1, 0, 9), (2, 0, 9)]);
        for r in &mut records {
            r.upload_time_ms -= age_ms;
        }
        let size = data.len() as u64;
        assert!(mem.put("wal/1/a.wal", data).await.is_ok());
        // Partition 2 is led here: only the first two slices are needed.
        let sink = MemSink::following(&[0, 1], 3);
        let f = fetcher(Arc::new(mem), sink.clone());
        f.on_metadata(upserts(&records[..2]));
        let r = f.run_once().await;
        assert_eq!((sink.leo(0), sink.leo(1)), (10, 10), "{r:?}");
        let needed: u64 = records[..2].iter().map(|m| u64::from(m.byte_length)).sum();
        let expected = if whole { size } else { needed };
        assert_eq!(r.bytes_downloaded, expected, "age {age_ms} ms: {r:?}");
        assert_eq!(r.gets, 1);
    }
}
