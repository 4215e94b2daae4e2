//! The follower's WAL fetcher: the async shell around the pure decisions of
//! [`crate::follower`] (RFC 0003, `docs/rfcs/0003-remote-wal-lifecycle.md`).
//!
//! One per broker. [`WalFetcher::on_metadata_read`] queues records of `__remote_wal_log_metadata`
//! for the partitions the [`FollowerSink`] follows and wakes the fetcher; a partition whose queue
//! is full has the rest read again later (`metadata_read.rs`). Each step then, for every
//! such partition, plans from the local log end offset and current leader epoch
//! ([`plan_partition`]), starts ranged GETs for planned slices not downloaded yet (coalesced
//! across partitions: one per contiguous run of one object, [`coalesce`]), and appends, in
//! offset order, the slices whose bytes are there, after verifying them ([`verify_slice`]).
//!
//! An object up to [`FetcherConfig::whole_object_max_bytes`] is read whole by its first GET and
//! kept for `OBJECT_KEPT_FOR` (2 s): the records of its other slices come over other metadata
//! partitions, a few milliseconds later, and are cut from it (or wait for its GET) instead of
//! each starting a GET of its own.
//!
//! # A pipeline, not rounds
//!
//! A step never waits for a GET: downloads run as tasks that store their bytes and wake the
//! fetcher, so new metadata starts its GET at once even while earlier GETs are in flight, and a
//! slow GET holds back only the later slices of its own partition. Several objects of one
//! partition may be in flight; a partition's slices are still appended strictly in offset
//! order. Downloaded-but-not-appended and in-flight bytes are bounded
//! ([`FetcherConfig::max_download_bytes`]); first slices of partitions start before later ones.
//!
//! # What always holds
//!
//! - Only verified slices that continue the local log exactly are appended, in offset order.
//! - The queue keeps, per partition, the latest record per compaction key (an upsert replaces, a
//!   tombstone removes), as compaction of the metadata topic would, except that a record of an
//!   older leader epoch never replaces a newer one (`upsert`).
//! - An object whose GET answers `NotFound` (deleted by the GC, or a failed AZ's bucket), an
//!   out-of-range or any non-transient error is marked unreadable; a slice that fails
//!   verification is marked unreadable. Later planning skips both (KIP-1176 rule 3). After an
//!   unreadable object the step plans again at once, so a record of the same range in another
//!   object (a new leader's republish) is used right away; only a range nothing else covers goes
//!   to the classic fetch.
//! - Nothing is appended to a log the leader of the current epoch has not confirmed yet
//!   ([`FollowerPartition::log_validated`]): after a leader change the follower first truncates
//!   by leader epoch through its replica fetcher, then the WAL path builds on the log.
//! - Every range that cannot be appended (metadata gap, unreadable object, corrupt slice,
//!   transient store error, refused append) is returned as a [`ClassicFetch`]: the follower
//!   never stalls on the WAL path. The caller keeps fetching it classically until its log end
//!   reaches `until`; the WAL path then takes over by itself. A range merely waiting for its GET
//!   is not such a range. A transient GET failure is retried on the next retry tick, not at
//!   once.
//! - A restart loses nothing: a new fetcher plans from the sink's log end offset, so replayed
//!   records below it are skipped as already covered (no gap, no duplicate).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use ferry_common::SharedClock;
use ferry_objstore::ObjectStore;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use uuid::Uuid;

use crate::error::{ErrorKind, Result};
use crate::follower::{
    coalesce, plan_partition, verify_slice, ClassicFetch, FollowerPartition, RangedGet, SkipReason,
};
use crate::metadata::{WalMetadataEvent, WalSliceMetadata};
use crate::slice_bytes::SliceBytes;
use crate::stages::Stage;
use crate::uploader::WalPartition;

mod download;
mod metadata_read;
mod report;
mod state;
use download::download;
pub use metadata_read::MetadataReadTaken;
pub use report::{FetchReport, FetcherConfig, PartitionClassicFetch};
use state::{
    event_partition, lock, object_of, partition_of, KeptObject, ObjectRef, Queued, Shared, Slot,
    State, Unreadable,
};

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
    /// appends a Fetch response. Must refuse records that do not start at the log end, and
    /// records planned at `leader_epoch` once the partition has moved to another epoch (its
    /// log is checked against the new leader first). The records are (part of) a slice whose
    /// CRC-32C matched ([`verify_slice`]): byte for byte what the leader validated and wrote,
    /// so checking their batch CRCs again is optional.
    async fn append_as_follower(
        &self,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        records: SliceBytes,
    ) -> Result<()>;
}

/// Finds the store of a bucket named in metadata (`None`: unknown bucket, treated as unreadable).
pub type StoreResolver = Arc<dyn Fn(&str) -> Option<Arc<dyn ObjectStore>> + Send + Sync>;

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

/// Plans per step when objects turn out unreadable (each skips the objects found so).
const UNREADABLE_REPLANS: usize = 3;

/// How long an object downloaded whole is kept for slices whose records arrive later (they
/// come within milliseconds of each other; this covers a loaded machine).
pub(crate) const OBJECT_KEPT_FOR: Duration = Duration::from_secs(2);

/// Kept objects hold at most this share (1/n) of [`FetcherConfig::max_download_bytes`].
const KEPT_SHARE_OF_BUDGET: u64 = 4;

/// Queues `q` under its base offset (the metadata key within a partition), replacing the
/// record there unless that one is of a newer leader epoch: a demoted leader's uploader can
/// publish a record of the same base offset after the new leader's, and the plan would skip it
/// as stale, sending the range to the classic fetch. Returns whether `q` was taken.
fn upsert(map: &mut BTreeMap<i64, Queued>, q: Queued) -> bool {
    if map
        .get(&q.meta.base_offset)
        .is_some_and(|old| old.meta.leader_epoch > q.meta.leader_epoch)
    {
        return false;
    }
    map.insert(q.meta.base_offset, q);
    true
}

/// One partition's planned slices, as a step applies them.
struct Planned {
    wp: WalPartition,
    state: FollowerPartition,
    fetch: Vec<WalSliceMetadata>,
    gap: Option<ClassicFetch>,
}

/// How applying one partition ended.
enum Applied {
    /// Appended what was there; the rest waits for GETs (or needs them started).
    Waiting,
    /// An unreadable object stopped it at a range ending (exclusive) here: plan again.
    Unreadable(i64),
    /// A range went to the classic fetch, or the log moved under us: nothing more this step.
    Stopped,
}

/// The per-broker follower WAL fetcher (see the module docs).
pub struct WalFetcher {
    stores: StoreResolver,
    sink: Arc<dyn FollowerSink>,
    config: FetcherConfig,
    clock: SharedClock,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    /// Steps do not overlap (a partition's appends keep their order).
    step_lock: tokio::sync::Mutex<()>,
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
        let permits = Arc::new(Semaphore::new(config.max_concurrent_gets.max(1)));
        Self {
            stores,
            sink,
            config,
            clock: ferry_common::system_clock(),
            shared: Arc::new(Shared::default()),
            permits,
            step_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The wall clock the `metadata_delivery` stage is measured with (the uploader stamps
    /// `upload_time_ms` with its own).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Queues metadata records (decoded with `WalMetadataRecord::decode`), in order, without
    /// their place in the metadata topic (tests, tools; the broker uses
    /// [`Self::on_metadata_read`]). Records of partitions the sink does not follow are dropped
    /// (or parked, see `State::parked`). Returns the followed partitions whose queue was full
    /// ([`FetcherConfig::max_records_per_partition`]): none of their records from the first
    /// that did not fit was taken.
    pub fn on_metadata(
        &self,
        events: impl IntoIterator<Item = WalMetadataEvent>,
    ) -> Vec<WalPartition> {
        self.take(events.into_iter().collect(), |_, _| true)
            .into_keys()
            .collect()
    }

    /// Queues the events `offered` allows (by index and partition), in order; a followed
    /// partition whose queue is full takes none of its events from the first that does not
    /// fit. Returns those partitions, each with the index of that first event.
    fn take(
        &self,
        events: Vec<WalMetadataEvent>,
        offered: impl Fn(usize, &WalPartition) -> bool,
    ) -> HashMap<WalPartition, usize> {
        let now_ms = self.clock.now_ms();
        // Ask the sink before taking our lock, so a sink never runs under it.
        let events: Vec<(usize, WalMetadataEvent, Keep, Option<i64>)> = events
            .into_iter()
            .enumerate()
            .filter(|(i, e)| offered(*i, &event_partition(e)))
            .map(|(i, e)| {
                let (keep, delivery_ms) = match &e {
                    WalMetadataEvent::Upsert(m) => {
                        match self.sink.partition_state(m.topic_id, m.partition) {
                            // Replays of old records (a restart) would swamp the stage.
                            Some(fs) => (
                                Keep::Queue,
                                (m.last_offset >= fs.log_end_offset)
                                    .then(|| now_ms - m.upload_time_ms),
                            ),
                            None if self.sink.may_follow_later(m.topic_id, m.partition) => {
                                (Keep::Park, None)
                            }
                            None => (Keep::Drop, None),
                        }
                    }
                    WalMetadataEvent::Tombstone(_) => (Keep::Queue, None),
                };
                (i, e, keep, delivery_ms)
            })
            .collect();
        let mut refused: HashMap<WalPartition, usize> = HashMap::new();
        if events.is_empty() {
            return refused;
        }
        let arrived = Instant::now();
        let mut delivered = Vec::new();
        let mut taken = 0;
        let mut st = self.state();
        let cap = self.config.max_records_per_partition;
        for (i, event, keep, delivery_ms) in events {
            let wp = event_partition(&event);
            // Its later events would leave a hole behind the one that did not fit.
            if refused.contains_key(&wp) {
                continue;
            }
            match event {
                WalMetadataEvent::Upsert(_) if keep == Keep::Drop => {}
                WalMetadataEvent::Upsert(m) if keep == Keep::Park => {
                    let (_, map) = st
                        .parked
                        .entry(wp)
                        .or_insert_with(|| (arrived, BTreeMap::new()));
                    // Beyond the cap the newest go, as in the queue: a partition not followed
                    // yet is typically one of a broker that just restarted, replaying the
                    // metadata of the objects kept for it (it was offline); it needs the
                    // oldest first, and takes what is dropped by the classic fetch. (Parked
                    // records are never read again: most belong to partitions this broker
                    // does not host at all.)
                    upsert(map, Queued { meta: m, arrived });
                    while map.len() > cap {
                        map.pop_last();
                    }
                }
                WalMetadataEvent::Upsert(m) => {
                    let full = st
                        .records
                        .get(&wp)
                        .is_some_and(|map| map.len() >= cap && !map.contains_key(&m.base_offset));
                    if full {
                        refused.insert(wp, i);
                        continue;
                    }
                    if upsert(
                        st.records.entry(wp).or_default(),
                        Queued { meta: m, arrived },
                    ) {
                        delivered.extend(delivery_ms);
                    }
                }
                WalMetadataEvent::Tombstone(k) => {
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
            taken += 1;
        }
        drop(st);
        for ms in delivered {
            self.config.stages.observe_ms(Stage::MetadataDelivery, ms);
        }
        if taken > 0 {
            self.shared.wake.notify_one();
        }
        refused
    }

    /// Runs until `shutdown` completes: a step right after new metadata arrives or a GET
    /// finishes, and a retry step every `retry_interval` (transient GET failures, classic gaps
    /// re-reported, parked records). Each step's report goes to `on_report`, which hands its
    /// `classic` ranges to the replica fetcher. Timers use tokio time.
    pub async fn run<F, R>(&self, retry_interval: Duration, mut on_report: R, shutdown: F)
    where
        F: std::future::Future<Output = ()>,
        R: FnMut(FetchReport),
    {
        tokio::pin!(shutdown);
        let mut retry = tokio::time::interval(retry_interval);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; nothing to retry yet.
        retry.tick().await;
        loop {
            let retry_now = tokio::select! {
                _ = &mut shutdown => break,
                _ = self.shared.wake.notified() => false,
                _ = retry.tick() => true,
            };
            let report = self.step(retry_now).await;
            on_report(report);
        }
    }

    /// Records queued across all partitions.
    pub fn queued(&self) -> usize {
        self.state().records.values().map(BTreeMap::len).sum()
    }

    /// Steps until every GET it started has finished and its slices were appended (tests, and
    /// callers that want one synchronous pass). Transient failures are retried once, at the
    /// start.
    pub async fn run_once(&self) -> FetchReport {
        let mut report = self.step(true).await;
        // Slices cut from a kept object are appended by the next step, with no GET to wait for.
        let mut again = report.slices_from_kept_objects > 0;
        loop {
            let done = self.shared.get_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if !again {
                if self.state().gets_in_flight == 0 {
                    break;
                }
                done.await;
            }
            let step = self.step(false).await;
            again = step.slices_from_kept_objects > 0;
            report.merge(step);
        }
        report
    }

    /// One step (see the module docs). `retry`: transient failures are tried again.
    async fn step(&self, retry: bool) -> FetchReport {
        let _one = self.step_lock.lock().await;
        let mut report = FetchReport::default();
        {
            let mut st = self.state();
            if retry {
                st.slots.retain(|_, s| !matches!(s, Slot::Transient));
            }
            let c = std::mem::take(&mut st.counters);
            report.bytes_downloaded += c.bytes_downloaded;
            report.unreadable_objects += c.unreadable_objects;
            report.transient_errors += c.transient_errors;
        }
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
            let covered = self.state().covers(&wp, now.log_end_offset);
            if now.log_end_offset < until && !reported && !covered {
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

    /// One plan, append and start-GETs pass. Returns, per partition that met an unreadable
    /// object, the end (exclusive) of the range that object held.
    async fn pass(&self, report: &mut FetchReport) -> HashMap<WalPartition, i64> {
        let mut unreadable = HashMap::new();
        let planned = self.plan(report, &mut unreadable);
        self.prune_slots();
        let mut heads = Vec::new();
        let mut later = Vec::new();
        // Partitions append concurrently (each in its own offset order): one partition's large
        // append does not hold back the others'.
        let applied = futures::future::join_all(planned.into_iter().map(|p| async move {
            let (gap, wp) = (p.gap, p.wp);
            let mut part_report = FetchReport::default();
            let (mut h, mut l) = (Vec::new(), Vec::new());
            let outcome = self.apply(p, &mut part_report, &mut h, &mut l).await;
            (wp, gap, outcome, part_report, h, l)
        }))
        .await;
        for (wp, gap, outcome, part_report, h, l) in applied {
            report.classic.extend(part_report.classic);
            report.slices_appended += part_report.slices_appended;
            report.corrupt_slices += part_report.corrupt_slices;
            heads.extend(h);
            later.extend(l);
            match outcome {
                Applied::Unreadable(until) => {
                    let u = unreadable.entry(wp).or_insert(until);
                    *u = (*u).max(until);
                    continue; // planned again without that object
                }
                Applied::Stopped => continue,
                Applied::Waiting => {}
            }
            if let Some(fetch) = gap {
                report.classic.push(PartitionClassicFetch {
                    partition: wp,
                    fetch,
                });
            }
        }
        heads.extend(later);
        self.start_gets(heads, report);
        unreadable
    }

    /// Forgets the bytes of records no longer queued (appended, covered, tombstoned).
    fn prune_slots(&self) {
        let mut st = self.state();
        let State { records, slots, .. } = &mut *st;
        slots.retain(|m, slot| {
            matches!(slot, Slot::InFlight)
                || records
                    .get(&partition_of(m))
                    .and_then(|map| map.get(&m.base_offset))
                    .is_some_and(|q| q.meta == *m)
        });
    }

    /// Moves parked records of partitions followed now into the queue; forgets those parked
    /// for longer than [`PARK_FOR`].
    fn unpark(&self) {
        let parked: Vec<WalPartition> = self.state().parked.keys().copied().collect();
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
        let mut st = self.state();
        let cap = self.config.max_records_per_partition;
        for (wp, followed) in followed {
            if followed {
                if let Some((_, parked)) = st.parked.remove(&wp) {
                    let map = st.records.entry(wp).or_default();
                    for (base, q) in parked {
                        if map.len() < cap || map.contains_key(&base) {
                            map.entry(base).or_insert(q);
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

    /// Plans every partition; prunes records that can never be used. Records skipped for an
    /// unreadable object that reach past the log end add their range end to `unreadable`.
    fn plan(
        &self,
        report: &mut FetchReport,
        unreadable: &mut HashMap<WalPartition, i64>,
    ) -> Vec<Planned> {
        self.unpark();
        // Ask the sink before taking our lock, so a sink never runs under it.
        let parts: Vec<WalPartition> = self.state().records.keys().copied().collect();
        let states: Vec<(WalPartition, Option<FollowerPartition>)> = parts
            .into_iter()
            .map(|wp| (wp, self.sink.partition_state(wp.topic_id, wp.partition)))
            .collect();
        let mut st = self.state();
        let mut out = Vec::new();
        for (wp, fs) in states {
            let Some(fs) = fs else {
                if let Some(map) = st.records.remove(&wp) {
                    for q in map.values() {
                        st.remove_if_same(&q.meta);
                    }
                }
                continue;
            };
            let records: Vec<WalSliceMetadata> = st
                .records
                .get(&wp)
                .map(|m| m.values().map(|q| q.meta.clone()).collect())
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
                out.push(Planned {
                    wp,
                    state: fs,
                    fetch: plan.fetch,
                    gap: plan.classic,
                });
            }
        }
        out
    }

    /// Verifies and appends one partition's downloaded slices in offset order; lists its
    /// slices that still need a GET (its first one in `heads`, the rest in `later`).
    async fn apply(
        &self,
        p: Planned,
        report: &mut FetchReport,
        heads: &mut Vec<WalSliceMetadata>,
        later: &mut Vec<WalSliceMetadata>,
    ) -> Applied {
        let Planned {
            wp,
            state: planned,
            fetch,
            ..
        } = p;
        let Some(mut leo) = self.log_end_if_still_planned(wp, &planned) else {
            return Applied::Stopped;
        };
        // Appending continues while each next slice's bytes are there.
        let mut appending = true;
        let mut first_missing = true;
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
            let data = {
                let st = self.state();
                match st.slots.get(&m) {
                    None => None,
                    Some(Slot::InFlight) => {
                        appending = false;
                        continue;
                    }
                    Some(Slot::Data { bytes, at }) => Some((bytes.clone(), *at)),
                    Some(Slot::Unreadable) => {
                        if !appending {
                            continue;
                        }
                        drop(st);
                        self.state().remove_if_same(&m);
                        return Applied::Unreadable(m.last_offset + 1);
                    }
                    Some(Slot::Transient) => {
                        if appending {
                            classic(report, leo);
                            return Applied::Stopped;
                        }
                        continue;
                    }
                }
            };
            let Some((data, downloaded_at)) = data else {
                // Not downloading yet: start it (the first missing slice of each partition
                // goes first, so every partition moves before any runs far ahead).
                if first_missing {
                    heads.push(m);
                    first_missing = false;
                } else {
                    later.push(m);
                }
                appending = false;
                continue;
            };
            if !appending {
                continue;
            }
            match self
                .append_slice(wp, &m, data, downloaded_at, leo, report)
                .await
            {
                Some(next) => leo = next,
                None => return Applied::Stopped,
            }
        }
        Applied::Waiting
    }

    /// The log end offset of `wp` if its log is still as planned: the same leader epoch and
    /// log end, confirmed by the leader. Otherwise (a classic fetch or a truncation moved it)
    /// `None`, and the fetcher is woken to plan again; a GET already running keeps its bytes.
    fn log_end_if_still_planned(
        &self,
        wp: WalPartition,
        planned: &FollowerPartition,
    ) -> Option<i64> {
        let now = self.sink.partition_state(wp.topic_id, wp.partition)?;
        if now.leader_epoch != planned.leader_epoch
            || now.log_end_offset != planned.log_end_offset
            || !now.log_validated
        {
            self.shared.wake.notify_one();
            return None;
        }
        Some(now.log_end_offset)
    }

    /// Verifies one downloaded slice of `wp` against the log end `leo` and appends it.
    /// Returns the new log end, or `None` when the partition stops here: the append was
    /// refused or the slice failed verification, and its range went to the classic fetch.
    async fn append_slice(
        &self,
        wp: WalPartition,
        m: &WalSliceMetadata,
        data: SliceBytes,
        downloaded_at: Instant,
        leo: i64,
        report: &mut FetchReport,
    ) -> Option<i64> {
        let classic = |report: &mut FetchReport| {
            report.classic.push(PartitionClassicFetch {
                partition: wp,
                fetch: ClassicFetch {
                    from: leo,
                    until: m.last_offset + 1,
                },
            })
        };
        match verify_slice(m, &data, leo) {
            Ok(None) => {
                self.state().remove_if_same(m);
                Some(leo)
            }
            Ok(Some(v)) => match self
                .sink
                // Planned only at its own epoch (`plan_partition`).
                .append_as_follower(wp.topic_id, wp.partition, m.leader_epoch, v.records)
                .await
            {
                Ok(()) => {
                    self.config
                        .stages
                        .observe(Stage::AppendWait, downloaded_at.elapsed());
                    report.slices_appended += 1;
                    self.state().remove_if_same(m);
                    Some(v.last_offset + 1)
                }
                Err(e) => {
                    tracing::warn!(?wp, error = %e, "follower refused a remote WAL slice; replanning next step");
                    classic(report);
                    None
                }
            },
            Err(e) => {
                debug_assert_eq!(e.kind(), ErrorKind::Corrupt);
                tracing::warn!(?wp, key = %m.object_key, error = %e, "remote WAL slice failed verification; classic fetch instead");
                report.corrupt_slices += 1;
                let mut st = self.state();
                st.unreadable
                    .insert(Unreadable::slice(m), self.config.max_unreadable);
                st.remove_if_same(m);
                drop(st);
                classic(report);
                None
            }
        }
    }

    /// The GETs of `slices`: one of the whole object for a fresh object no larger than
    /// [`FetcherConfig::whole_object_max_bytes`] (marked downloading, so that its later slices
    /// wait for it), coalesced ranges for the others.
    ///
    /// Only a fresh one (uploaded less than [`OBJECT_KEPT_FOR`] ago): the records of its other
    /// slices may still be on their way. An older object is one of a backlog (a follower back
    /// from an outage): its records were all published long ago, the queue holds those the
    /// follower needs, and the partitions reach the object at their own pace, often after the
    /// kept copy is gone; whole GETs there downloaded each object about five times. And only
    /// once: `read_whole_already` are slices of objects downloaded whole before (let go to stay
    /// within the kept objects' budget), which get GETs of their own ranges.
    fn plan_gets(
        &self,
        slices: Vec<WalSliceMetadata>,
        read_whole_already: Vec<WalSliceMetadata>,
        st: &mut State,
    ) -> Vec<RangedGet> {
        let max = self.config.whole_object_max_bytes;
        let fresh_since = self.clock.now_ms() - OBJECT_KEPT_FOR.as_millis() as i64;
        let (whole, mut ranged): (Vec<_>, Vec<_>) = slices.into_iter().partition(|m| {
            max > 0 && m.object_size > 0 && m.object_size <= max && m.upload_time_ms >= fresh_since
        });
        ranged.extend(read_whole_already);
        let mut gets = coalesce(&ranged, self.config.max_gap_bytes);
        let mut by_object: BTreeMap<ObjectRef, Vec<WalSliceMetadata>> = BTreeMap::new();
        for m in whole {
            by_object.entry(object_of(&m)).or_default().push(m);
        }
        for ((bucket, object_key), mut slices) in by_object {
            slices.sort_by_key(|m| m.byte_position);
            let size = slices.iter().map(|m| m.object_size).max().unwrap_or(0);
            // Records that disagree on the object's size, or a slice past it: their ranges only.
            if slices
                .iter()
                .any(|m| m.object_size != size || m.byte_range().end > size)
            {
                gets.extend(coalesce(&slices, self.config.max_gap_bytes));
                continue;
            }
            st.kept_objects.insert(
                (bucket.clone(), object_key.clone()),
                KeptObject::Downloading,
            );
            gets.push(RangedGet {
                bucket,
                object_key,
                range: 0..size,
                slices,
            });
        }
        gets
    }

    /// Starts coalesced ranged GETs for `slices` (in priority order) within the byte budget.
    fn start_gets(&self, slices: Vec<WalSliceMetadata>, report: &mut FetchReport) {
        if slices.is_empty() {
            return;
        }
        let mut st = self.state();
        let mut held = st.held_bytes();
        let mut chosen = Vec::new();
        for m in slices {
            let len = u64::from(m.byte_length);
            // At least one GET always runs, however large its slice.
            if held > 0 && held + len > self.config.max_download_bytes {
                break;
            }
            held += len;
            chosen.push(m);
        }
        let now = Instant::now();
        st.expire_kept_objects(
            now,
            OBJECT_KEPT_FOR,
            self.config.max_download_bytes / KEPT_SHARE_OF_BUDGET,
        );
        // Slices of an object downloaded whole, or downloading, need no GET of their own.
        let mut to_get = Vec::new();
        let mut read_whole_already = Vec::new();
        let mut cut_from_kept = false;
        {
            let State {
                kept_objects,
                slots,
                ..
            } = &mut *st;
            for m in &chosen {
                let slot = match kept_objects.get(&object_of(m)) {
                    Some(KeptObject::Downloading) => Slot::InFlight,
                    Some(kept) => match kept.cut(m) {
                        Some(bytes) => {
                            cut_from_kept = true;
                            Slot::Data { bytes, at: now }
                        }
                        None => {
                            read_whole_already.push(m.clone());
                            continue;
                        }
                    },
                    None => {
                        to_get.push(m.clone());
                        continue;
                    }
                };
                report.slices_from_kept_objects += 1;
                slots.insert(m.clone(), slot);
            }
        }
        if cut_from_kept {
            // Their bytes are here: the next step appends them.
            self.shared.wake.notify_one();
        }
        let gets = self.plan_gets(to_get, read_whole_already, &mut st);
        report.gets += gets.len();
        for g in &gets {
            for m in &g.slices {
                st.slots.insert(m.clone(), Slot::InFlight);
            }
        }
        st.gets_in_flight += gets.len();
        let arrived: HashMap<&WalSliceMetadata, Instant> = chosen
            .iter()
            .filter_map(|m| {
                st.records
                    .get(&partition_of(m))
                    .and_then(|map| map.get(&m.base_offset))
                    .map(|q| (m, q.arrived))
            })
            .collect();
        let now = Instant::now();
        for g in gets {
            let oldest = g
                .slices
                .iter()
                .filter_map(|m| arrived.get(m))
                .min()
                .copied()
                .unwrap_or(now);
            tokio::spawn(download(
                self.shared.clone(),
                self.permits.clone(),
                (self.stores)(&g.bucket),
                g,
                oldest,
                self.config.stages.clone(),
                self.config.max_unreadable,
            ));
        }
    }
}

#[cfg(test)]
#[path = "fetcher_test.rs"]
mod tests;
