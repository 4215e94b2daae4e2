//! The follower's WAL fetcher: the async shell around the pure decisions of
//! [`crate::follower`] (RFC 0003, `docs/rfcs/0003-remote-wal-lifecycle.md`).
//!
//! One per broker. [`WalFetcher::on_metadata`] queues records of `__remote_wal_log_metadata` for
//! the partitions the [`FollowerSink`] follows; [`WalFetcher::run_once`] then, for every such
//! partition, plans from the local log end offset and current leader epoch
//! ([`plan_partition`]), coalesces the fetches of *all* partitions into ranged GETs (one per
//! contiguous run of one object, [`coalesce`]), downloads them with bounded concurrency, splits
//! and verifies every slice ([`verify_slice`]) and appends it as a follower would append a Fetch
//! response.
//!
//! # What always holds
//!
//! - Only verified slices that continue the local log exactly are appended, in offset order.
//! - The queue keeps, per partition, the latest record per compaction key (an upsert replaces, a
//!   tombstone removes), as compaction of the metadata topic would.
//! - An object whose GET answers `NotFound` (deleted by the GC, or a failed AZ's bucket), an
//!   out-of-range or any non-transient error is marked unreadable; a slice that fails
//!   verification is marked unreadable. Later planning skips both (KIP-1176 rule 3). After an
//!   unreadable object the round plans again at once, so a record of the same range in another
//!   object (a new leader's republish) is used in the same round; only a range nothing else
//!   covers goes to the classic fetch.
//! - Nothing is appended to a log the leader of the current epoch has not confirmed yet
//!   ([`FollowerPartition::log_validated`]): after a leader change the follower first truncates
//!   by leader epoch through its replica fetcher, then the WAL path builds on the log.
//! - Every range not appended this round, for whatever reason (metadata gap, unreadable object,
//!   corrupt slice, transient store error, refused append), is returned as a [`ClassicFetch`]:
//!   the follower never stalls on the WAL path. The caller keeps fetching it classically until
//!   its log end reaches `until`; the WAL path then takes over by itself.
//! - A restart loses nothing: a new fetcher plans from the sink's log end offset, so replayed
//!   records below it are skipped as already covered (no gap, no duplicate).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use ferry_objstore::ObjectStore;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::error::{ErrorKind, Result};
use crate::follower::{
    coalesce, plan_partition, verify_slice, ClassicFetch, FollowerPartition, SkipReason,
};
use crate::metadata::{WalMetadataEvent, WalMetadataRecord, WalSliceMetadata};
use crate::uploader::WalPartition;

/// The follower's local log and metadata image, as the fetcher needs them.
#[async_trait]
pub trait FollowerSink: Send + Sync + std::fmt::Debug {
    /// Log end offset and current leader epoch of a partition this broker follows with the
    /// remote WAL; `None` when it does not (leader, not a replica, classic topic).
    fn partition_state(&self, topic_id: Uuid, partition: i32) -> Option<FollowerPartition>;

    /// For a partition not followed now: whether it may be soon (this broker does not know it
    /// yet), so that its metadata is worth keeping a while. False when it leads it.
    fn may_follow_later(&self, _topic_id: Uuid, _partition: i32) -> bool {
        true
    }

    /// Appends verified record batches that start exactly at the log end offset, as a follower
    /// appends a Fetch response. Must refuse records that do not start at the log end.
    async fn append_as_follower(
        &self,
        topic_id: Uuid,
        partition: i32,
        records: Bytes,
    ) -> Result<()>;
}

/// Finds the store of a bucket named in metadata (`None`: unknown bucket, treated as unreadable).
pub type StoreResolver = Arc<dyn Fn(&str) -> Option<Arc<dyn ObjectStore>> + Send + Sync>;

/// Fetcher tuning.
#[derive(Debug, Clone)]
pub struct FetcherConfig {
    /// Slices of one object this close (bytes) share one ranged GET (rule 7).
    pub max_gap_bytes: u64,
    /// Ranged GETs in flight at once (at least 1).
    pub max_concurrent_gets: usize,
    /// Records queued per partition; beyond this new records are dropped (a classic gap).
    pub max_records_per_partition: usize,
    /// Unreadable objects and slices remembered (oldest forgotten first).
    pub max_unreadable: usize,
}

impl Default for FetcherConfig {
    fn default() -> Self {
        Self {
            max_gap_bytes: 64 << 10,
            max_concurrent_gets: 16,
            max_records_per_partition: 4_096,
            max_unreadable: 16_384,
        }
    }
}

/// A range one partition must get by the classic fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionClassicFetch {
    pub partition: WalPartition,
    pub fetch: ClassicFetch,
}

/// What one [`WalFetcher::run_once`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchReport {
    /// Ranges to fetch classically, per partition in offset order.
    pub classic: Vec<PartitionClassicFetch>,
    /// Ranged GETs issued.
    pub gets: usize,
    pub bytes_downloaded: u64,
    /// Slices appended to local logs.
    pub slices_appended: usize,
    /// Records skipped for a stale leader epoch (rule 1).
    pub stale_skipped: usize,
    /// Objects newly marked unreadable.
    pub unreadable_objects: usize,
    /// Slices that failed verification.
    pub corrupt_slices: usize,
    /// Transient store errors (the records stay queued).
    pub transient_errors: usize,
}

/// What made a record unusable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Unreadable {
    Object {
        bucket: String,
        key: String,
    },
    Slice {
        bucket: String,
        key: String,
        position: u64,
    },
}

impl Unreadable {
    fn object(m: &WalSliceMetadata) -> Self {
        Self::Object {
            bucket: m.bucket.clone(),
            key: m.object_key.clone(),
        }
    }
    fn slice(m: &WalSliceMetadata) -> Self {
        Self::Slice {
            bucket: m.bucket.clone(),
            key: m.object_key.clone(),
            position: m.byte_position,
        }
    }
}

#[derive(Debug, Default)]
struct UnreadableSet {
    set: HashSet<Unreadable>,
    order: VecDeque<Unreadable>,
}

impl UnreadableSet {
    fn insert(&mut self, u: Unreadable, cap: usize) -> bool {
        if !self.set.insert(u.clone()) {
            return false;
        }
        self.order.push_back(u);
        while self.order.len() > cap.max(1) {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    fn contains(&self, m: &WalSliceMetadata) -> bool {
        self.set.contains(&Unreadable::object(m)) || self.set.contains(&Unreadable::slice(m))
    }
}

#[derive(Debug, Default)]
struct State {
    /// Per partition: base offset (the compaction key within a partition) → latest record.
    records: HashMap<WalPartition, BTreeMap<i64, WalSliceMetadata>>,
    /// Records of partitions this broker does not follow (yet), since when: a new topic's
    /// first metadata can arrive before this broker applied the image that makes it a
    /// follower. Moved to `records` once it follows; forgotten after [`PARK_FOR`] (it leads
    /// the partition, or does not host it).
    parked: HashMap<WalPartition, (Instant, BTreeMap<i64, WalSliceMetadata>)>,
    unreadable: UnreadableSet,
    dropped: u64,
}

impl State {
    fn remove_if_same(&mut self, m: &WalSliceMetadata) {
        let wp = partition_of(m);
        if let Some(map) = self.records.get_mut(&wp) {
            if map.get(&m.base_offset) == Some(m) {
                map.remove(&m.base_offset);
            }
            if map.is_empty() {
                self.records.remove(&wp);
            }
        }
    }
}

/// What [`WalFetcher::on_metadata`] does with an upsert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// A partition followed here: queue it for download.
    Queue,
    /// Not followed yet but may be: park it (see `State::parked`).
    Park,
    /// Led here: never needed.
    Drop,
}

/// How long records of a partition not followed here are kept in case it becomes followed.
const PARK_FOR: Duration = Duration::from_secs(10);

fn partition_of(m: &WalSliceMetadata) -> WalPartition {
    WalPartition {
        topic_id: m.topic_id,
        partition: m.partition,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How the download of one slice ended.
enum Download {
    Data(Bytes),
    /// The object cannot be read (marked); classic fetch instead.
    Unreadable,
    /// Try again next round; classic fetch meanwhile.
    Transient,
}

/// Passes per round when objects turn out unreadable (each pass skips the objects found so).
const UNREADABLE_REPLANS: usize = 3;

/// The per-broker follower WAL fetcher (see the module docs).
pub struct WalFetcher {
    stores: StoreResolver,
    sink: Arc<dyn FollowerSink>,
    config: FetcherConfig,
    state: Mutex<State>,
    round: tokio::sync::Mutex<()>,
    wake: tokio::sync::Notify,
}

impl std::fmt::Debug for WalFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalFetcher")
            .field("sink", &self.sink)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WalFetcher {
    /// A fetcher with default tuning.
    pub fn new<F>(store_for_bucket: F, sink: Arc<dyn FollowerSink>) -> Self
    where
        F: Fn(&str) -> Option<Arc<dyn ObjectStore>> + Send + Sync + 'static,
    {
        Self::with_config(Arc::new(store_for_bucket), sink, FetcherConfig::default())
    }

    pub fn with_config(
        stores: StoreResolver,
        sink: Arc<dyn FollowerSink>,
        config: FetcherConfig,
    ) -> Self {
        Self {
            stores,
            sink,
            config,
            state: Mutex::new(State::default()),
            round: tokio::sync::Mutex::new(()),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// Queues metadata records (decoded with `WalMetadataRecord::decode`). Records of
    /// partitions the sink does not follow are dropped.
    pub fn on_metadata(&self, events: impl IntoIterator<Item = WalMetadataEvent>) {
        // Ask the sink before taking our lock, so a sink never runs under it.
        let events: Vec<(WalMetadataEvent, Keep)> = events
            .into_iter()
            .map(|e| {
                let keep = match &e {
                    WalMetadataEvent::Upsert(m) => {
                        if self.sink.partition_state(m.topic_id, m.partition).is_some() {
                            Keep::Queue
                        } else if self.sink.may_follow_later(m.topic_id, m.partition) {
                            Keep::Park
                        } else {
                            Keep::Drop
                        }
                    }
                    WalMetadataEvent::Tombstone(_) => Keep::Queue,
                };
                (e, keep)
            })
            .collect();
        if events.is_empty() {
            return;
        }
        let mut st = lock(&self.state);
        for (event, keep) in events {
            match event {
                WalMetadataEvent::Upsert(_) if keep == Keep::Drop => {}
                WalMetadataEvent::Upsert(m) if keep == Keep::Park => {
                    let cap = self.config.max_records_per_partition;
                    let (_, map) = st
                        .parked
                        .entry(partition_of(&m))
                        .or_insert_with(|| (Instant::now(), BTreeMap::new()));
                    // Beyond the cap the oldest go: a partition that becomes followed late
                    // starts classic anyway if it lacks the first records.
                    map.insert(m.base_offset, m);
                    while map.len() > cap {
                        map.pop_first();
                    }
                }
                WalMetadataEvent::Upsert(m) => {
                    let cap = self.config.max_records_per_partition;
                    let map = st.records.entry(partition_of(&m)).or_default();
                    if map.len() >= cap && !map.contains_key(&m.base_offset) {
                        st.dropped += 1;
                        continue;
                    }
                    map.insert(m.base_offset, m);
                }
                WalMetadataEvent::Tombstone(k) => {
                    let wp = WalPartition {
                        topic_id: k.topic_id,
                        partition: k.partition,
                    };
                    if let Some(map) = st.records.get_mut(&wp) {
                        map.remove(&k.base_offset);
                        if map.is_empty() {
                            st.records.remove(&wp);
                        }
                    }
                    if let Some((_, map)) = st.parked.get_mut(&wp) {
                        map.remove(&k.base_offset);
                    }
                }
            }
        }
        drop(st);
        self.wake.notify_one();
    }

    /// Runs rounds until `shutdown` completes: right after new metadata arrives, and every
    /// `interval` otherwise (to retry transient failures and re-report classic gaps). Each
    /// round's report goes to `on_report`, which hands its `classic` ranges to the replica
    /// fetcher. Timers use tokio time.
    pub async fn run<F, R>(&self, interval: std::time::Duration, mut on_report: R, shutdown: F)
    where
        F: std::future::Future<Output = ()>,
        R: FnMut(FetchReport),
    {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
            let report = self.run_once().await;
            on_report(report);
        }
    }

    /// Decodes raw records of the metadata topic (key, value; `None` value = tombstone) and
    /// queues them like [`WalFetcher::on_metadata`]. Undecodable records are skipped (logged)
    /// and counted in the result: a lost record only costs a classic fetch.
    pub fn on_raw_metadata<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> usize {
        let mut bad = 0;
        let mut events = Vec::new();
        for (key, value) in records {
            match WalMetadataRecord::decode(key, value) {
                Ok(e) => events.push(e),
                Err(e) => {
                    tracing::warn!(error = %e, "undecodable remote WAL metadata record skipped");
                    bad += 1;
                }
            }
        }
        self.on_metadata(events);
        bad
    }

    /// Records queued across all partitions.
    pub fn queued(&self) -> usize {
        lock(&self.state).records.values().map(BTreeMap::len).sum()
    }

    /// Records dropped because a partition's queue was full.
    pub fn dropped(&self) -> u64 {
        lock(&self.state).dropped
    }

    /// Plans, downloads, verifies and appends (see the module docs). Rounds do not overlap.
    pub async fn run_once(&self) -> FetchReport {
        let _round = self.round.lock().await;
        let mut report = FetchReport::default();
        // Ranges whose object turned out unreadable: another record (a new leader's republish)
        // may cover them, so plan again at once before falling back to the classic fetch.
        let mut unreadable: HashMap<WalPartition, i64> = HashMap::new();
        for _ in 0..UNREADABLE_REPLANS {
            let hit = self.pass(&mut report).await;
            if hit.is_empty() {
                break;
            }
            for (wp, until) in hit {
                let u = unreadable.entry(wp).or_insert(until);
                *u = (*u).max(until);
            }
        }
        for (wp, until) in unreadable {
            let Some(now) = self.sink.partition_state(wp.topic_id, wp.partition) else {
                continue;
            };
            let reported = report
                .classic
                .iter()
                .any(|c| c.partition == wp && c.fetch.until >= until);
            if now.log_end_offset < until && !reported {
                report.classic.push(PartitionClassicFetch {
                    partition: wp,
                    fetch: ClassicFetch {
                        from: now.log_end_offset,
                        until,
                    },
                });
            }
        }
        report
    }

    /// One plan, download and append pass. Returns, per partition that met an unreadable
    /// object, the end (exclusive) of the range that object held.
    async fn pass(&self, report: &mut FetchReport) -> HashMap<WalPartition, i64> {
        let mut unreadable = HashMap::new();
        let planned = self.plan(report, &mut unreadable);
        if planned.is_empty() {
            return unreadable;
        }
        let all: Vec<WalSliceMetadata> = planned
            .iter()
            .flat_map(|(_, _, fetch, _)| fetch.iter().cloned())
            .collect();
        let downloads = self.download(&all, report).await;
        for (wp, planned_state, fetch, gap) in planned {
            if let Some(until) = self
                .apply(wp, planned_state, fetch, &downloads, report)
                .await
            {
                let u = unreadable.entry(wp).or_insert(until);
                *u = (*u).max(until);
                continue; // replanned without that object
            }
            if let Some(fetch) = gap {
                report.classic.push(PartitionClassicFetch {
                    partition: wp,
                    fetch,
                });
            }
        }
        unreadable
    }

    /// Moves parked records of partitions followed now into the queue; forgets those parked
    /// for longer than [`PARK_FOR`].
    fn unpark(&self) {
        let parked: Vec<WalPartition> = lock(&self.state).parked.keys().copied().collect();
        if parked.is_empty() {
            return;
        }
        let followed: Vec<(WalPartition, bool)> = parked
            .into_iter()
            .map(|wp| {
                let f = self
                    .sink
                    .partition_state(wp.topic_id, wp.partition)
                    .is_some();
                (wp, f)
            })
            .collect();
        let mut st = lock(&self.state);
        let cap = self.config.max_records_per_partition;
        for (wp, followed) in followed {
            if followed {
                if let Some((_, parked)) = st.parked.remove(&wp) {
                    let map = st.records.entry(wp).or_default();
                    for (base, m) in parked {
                        if map.len() < cap || map.contains_key(&base) {
                            map.entry(base).or_insert(m);
                        }
                    }
                }
            } else if st
                .parked
                .get(&wp)
                .is_some_and(|(since, _)| since.elapsed() >= PARK_FOR)
            {
                st.parked.remove(&wp);
            }
        }
    }

    /// Step 1: plans every partition; prunes records that can never be used. Records skipped
    /// for an unreadable object that reach past the log end add their range end to
    /// `unreadable`.
    #[allow(clippy::type_complexity)]
    fn plan(
        &self,
        report: &mut FetchReport,
        unreadable: &mut HashMap<WalPartition, i64>,
    ) -> Vec<(
        WalPartition,
        FollowerPartition,
        Vec<WalSliceMetadata>,
        Option<ClassicFetch>,
    )> {
        self.unpark();
        // Ask the sink before taking our lock, so a sink never runs under it.
        let parts: Vec<WalPartition> = lock(&self.state).records.keys().copied().collect();
        let states: Vec<(WalPartition, Option<FollowerPartition>)> = parts
            .into_iter()
            .map(|wp| (wp, self.sink.partition_state(wp.topic_id, wp.partition)))
            .collect();
        let mut st = lock(&self.state);
        let mut out = Vec::new();
        for (wp, fs) in states {
            let Some(fs) = fs else {
                st.records.remove(&wp);
                continue;
            };
            let records: Vec<WalSliceMetadata> = st
                .records
                .get(&wp)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default();
            let plan = plan_partition(fs, &records, |r| st.unreadable.contains(r));
            for (r, reason) in &plan.skipped {
                match reason {
                    SkipReason::FutureLeaderEpoch { .. } => {}
                    SkipReason::StaleLeaderEpoch { .. } => {
                        report.stale_skipped += 1;
                        st.remove_if_same(r);
                    }
                    SkipReason::ObjectUnreadable => {
                        if r.last_offset >= fs.log_end_offset {
                            let u = unreadable.entry(wp).or_insert(r.last_offset + 1);
                            *u = (*u).max(r.last_offset + 1);
                        }
                        st.remove_if_same(r);
                    }
                    SkipReason::AlreadyCovered => {
                        st.remove_if_same(r);
                    }
                }
            }
            if plan.fetch.is_empty() {
                if let Some(fetch) = plan.classic {
                    report.classic.push(PartitionClassicFetch {
                        partition: wp,
                        fetch,
                    });
                }
            } else {
                out.push((wp, fs, plan.fetch, plan.classic));
            }
        }
        out
    }

    /// Step 2: coalesced ranged GETs with bounded concurrency; one outcome per slice.
    async fn download(
        &self,
        slices: &[WalSliceMetadata],
        report: &mut FetchReport,
    ) -> HashMap<WalSliceMetadata, Download> {
        let gets = coalesce(slices, self.config.max_gap_bytes);
        report.gets += gets.len();
        let permits = Arc::new(Semaphore::new(self.config.max_concurrent_gets.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        for (i, g) in gets.iter().enumerate() {
            let store = (self.stores)(&g.bucket);
            let key = g.object_key.clone();
            let range = g.range.clone();
            let permits = permits.clone();
            tasks.spawn(async move {
                let _permit = permits.acquire_owned().await;
                let result = match store {
                    None => None,
                    Some(s) => Some(s.get_range(&key, range).await),
                };
                (i, result)
            });
        }
        let mut results: Vec<Option<Option<ferry_objstore::Result<Bytes>>>> =
            gets.iter().map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, r)) => {
                    if let Some(slot) = results.get_mut(i) {
                        *slot = Some(r);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "remote WAL GET task failed"),
            }
        }
        let mut out = HashMap::new();
        for (g, result) in gets.iter().zip(results) {
            let mark_unreadable = |report: &mut FetchReport| {
                if let Some(first) = g.slices.first() {
                    let newly = lock(&self.state)
                        .unreadable
                        .insert(Unreadable::object(first), self.config.max_unreadable);
                    if newly {
                        report.unreadable_objects += 1;
                    }
                }
            };
            let outcome = match result {
                Some(Some(Ok(data))) => {
                    report.bytes_downloaded += data.len() as u64;
                    match g.split(&data) {
                        Ok(parts) => {
                            for (m, bytes) in parts {
                                out.insert(m, Download::Data(bytes));
                            }
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(key = %g.object_key, error = %e, "remote WAL GET returned the wrong length");
                            mark_unreadable(report);
                            Download::Unreadable
                        }
                    }
                }
                Some(Some(Err(e))) if e.is_retriable() => {
                    tracing::debug!(key = %g.object_key, error = %e, "remote WAL GET failed; classic fetch meanwhile");
                    report.transient_errors += 1;
                    Download::Transient
                }
                Some(Some(Err(e))) => {
                    tracing::info!(key = %g.object_key, error = %e, "remote WAL object unreadable; skipping it");
                    mark_unreadable(report);
                    Download::Unreadable
                }
                Some(None) => {
                    tracing::warn!(bucket = %g.bucket, "no store for remote WAL bucket; skipping its objects");
                    mark_unreadable(report);
                    Download::Unreadable
                }
                None => {
                    report.transient_errors += 1;
                    Download::Transient
                }
            };
            let unreadable = matches!(outcome, Download::Unreadable);
            for m in &g.slices {
                let copy = if unreadable {
                    Download::Unreadable
                } else {
                    Download::Transient
                };
                out.insert(m.clone(), copy);
            }
        }
        out
    }

    /// Step 3: verifies and appends one partition's slices in offset order. Returns the end
    /// (exclusive) of a slice whose object was unreadable, which stopped it.
    async fn apply(
        &self,
        wp: WalPartition,
        planned: FollowerPartition,
        fetch: Vec<WalSliceMetadata>,
        downloads: &HashMap<WalSliceMetadata, Download>,
        report: &mut FetchReport,
    ) -> Option<i64> {
        // The log may have moved (classic fetch, truncation) while we downloaded.
        let now = self.sink.partition_state(wp.topic_id, wp.partition)?;
        if now.leader_epoch != planned.leader_epoch
            || now.log_end_offset < planned.log_end_offset
            || !now.log_validated
        {
            return None; // epoch change or truncation: replanned next round
        }
        let mut leo = now.log_end_offset;
        for m in fetch {
            let classic = |report: &mut FetchReport, from: i64| {
                report.classic.push(PartitionClassicFetch {
                    partition: wp,
                    fetch: ClassicFetch {
                        from,
                        until: m.last_offset + 1,
                    },
                })
            };
            let data = match downloads.get(&m) {
                Some(Download::Data(d)) => d,
                Some(Download::Unreadable) => {
                    lock(&self.state).remove_if_same(&m);
                    return Some(m.last_offset + 1);
                }
                Some(Download::Transient) | None => {
                    classic(report, leo);
                    return None;
                }
            };
            match verify_slice(&m, data, leo) {
                Ok(None) => lock(&self.state).remove_if_same(&m),
                Ok(Some(v)) => {
                    match self
                        .sink
                        .append_as_follower(wp.topic_id, wp.partition, v.records)
                        .await
                    {
                        Ok(()) => {
                            leo = v.last_offset + 1;
                            report.slices_appended += 1;
                            lock(&self.state).remove_if_same(&m);
                        }
                        Err(e) => {
                            tracing::warn!(?wp, error = %e, "follower refused a remote WAL slice; replanning next round");
                            classic(report, leo);
                            return None;
                        }
                    }
                }
                Err(e) => {
                    debug_assert_eq!(e.kind(), ErrorKind::Corrupt);
                    tracing::warn!(?wp, key = %m.object_key, error = %e, "remote WAL slice failed verification; classic fetch instead");
                    report.corrupt_slices += 1;
                    let mut st = lock(&self.state);
                    st.unreadable
                        .insert(Unreadable::slice(&m), self.config.max_unreadable);
                    st.remove_if_same(&m);
                    drop(st);
                    classic(report, leo);
                    return None;
                }
            }
        }
        None
    }
}

#[cfg(test)]
#[path = "fetcher_test.rs"]
mod tests;
