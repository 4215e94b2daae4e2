//! Garbage collection of this broker's remote WAL objects, and of those a broker gone for good
//! left in the same bucket (RFC 0003, `docs/rfcs/0003-remote-wal-lifecycle.md`).
//!
//! - [`GcPlanner`] (pure, no I/O, no clock): tracks the objects this broker uploaded, and decides
//!   which are deletable (replica progress or age) and which listed objects are orphans.
//! - [`WalGc`] (async): executes the plans over an `Arc<dyn ObjectStore>` (the broker's own
//!   bucket) and a [`TombstonePublisher`].
//!
//! # Rules
//!
//! 1. **Needed by nobody**: for every slice of the object, every *assigned* replica's log end
//!    offset is `> last_offset` (not just the ISR: a replica that is offline or behind catches
//!    up through these objects when it returns, KIP-1176's point), or, for a topic with
//!    `remote.storage.enable=true`, the long-term tier holds the slice
//!    ([`ReplicaProgressSource::tiered_end`]; a replica that needs it fetches from the leader,
//!    or from the tier once it is below the leader's local log start). Unknown partitions and
//!    empty replica lists never count as held.
//! 2. **Deletable by age**: `now - upload_time_ms` is above the lifetime bound of every slice's
//!    topic: its effective `local.retention.ms` (as the [`ReplicaProgressSource`] resolves it;
//!    `-1` never), capped by [`GcConfig::max_retention_ms`]. A replica still lacking the data
//!    then (offline longer than that) uses the classic fetch. A slice whose topic the source
//!    does not know (deleted, or not in this broker's image yet) uses
//!    [`GcConfig::local_retention_ms`].
//! 3. **Delete, then tombstone**: the object is deleted first, then its slices' records are
//!    tombstoned. A crash in between leaves metadata pointing at a missing object, which
//!    followers skip as unreadable (classic fetch instead); the replay after restart tracks the
//!    object again and the idempotent DELETE and the tombstones are retried. Failures at either
//!    step keep the object `DeletePending` for the next round; nothing is forgotten.
//! 4. **Orphans**: a listed object under `wal/<broker-id>/` that parses as this broker's key, is
//!    not tracked, and was created more than `orphan_grace_ms` ago, **in two consecutive
//!    sweeps**: a restarted broker's local metadata replicas may still be catching up with
//!    their leaders when the replay first reaches their end, and an object published before the
//!    crash must not be taken for an orphan in that window. The sweep refuses to run until
//!    [`GcPlanner::set_metadata_caught_up`]: before the metadata replay is complete every
//!    object would look like an orphan.
//! 5. **Key ownership**: a newer upsert of a key for another object (a republish) takes the key
//!    away; an object owning no key is dropped from tracking and left to the orphan sweep.
//! 6. **Objects of a broker gone for good**: the objects other brokers uploaded to this bucket
//!    (their key prefix names their uploader) are tracked from the metadata too, but collected
//!    only once [`ReplicaProgressSource::gone_uploaders`] names their uploader (never this
//!    broker): the broker glue does so for a broker absent from the cluster for longer than the
//!    metadata topic's retention, on one live broker of its bucket. Then its tracked objects
//!    older than `orphan_grace_ms` are deleted and tombstoned by rule 3, and the orphan sweep
//!    also lists its key prefix (rule 4, for objects whose metadata already expired). Nobody
//!    else would: a broker collects only its own objects otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use ferry_common::SharedClock;
use ferry_objstore::keys::WalObjectKey;
use ferry_objstore::{ObjStoreError, ObjectMeta, ObjectStore};

use crate::error::Result;
use crate::failure_log::FailureLog;
use crate::lifecycle::WalObjectState;
use crate::metadata::{WalMetadataEvent, WalMetadataKey, WalSliceMetadata};
use crate::uploader::WalPartition;

/// GC tuning.
#[derive(Debug, Clone)]
pub struct GcConfig {
    /// This broker: its own objects (key prefix and `uploader_broker_id`) are collected, others'
    /// only by rule 6.
    pub broker_id: i32,
    /// Age bound for slices of topics the [`ReplicaProgressSource`] does not know (see rule 2);
    /// known topics use their own effective `local.retention.ms`.
    pub local_retention_ms: i64,
    /// Cap of every age bound (rule 2), whatever the topics' retention says (`i64::MAX`: none).
    pub max_retention_ms: i64,
    /// How old an untracked object must be before the sweep deletes it (e.g. 2x upload timeout).
    pub orphan_grace_ms: i64,
    /// Most DELETEs issued per round (retention plus orphans each).
    pub max_deletes_per_round: usize,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            broker_id: 0,
            local_retention_ms: 24 * 3_600_000,
            max_retention_ms: i64::MAX,
            orphan_grace_ms: 60_000,
            max_deletes_per_round: 1_000,
        }
    }
}

/// One replica's progress as the partition leader tracks it from its Fetch requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaProgress {
    pub broker_id: i32,
    /// Next offset the replica expects.
    pub log_end_offset: i64,
    pub in_sync: bool,
}

/// A partition's assigned replicas, leader included (one whose progress is not known, e.g.
/// offline since the leader took over, with log end offset -1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionProgress {
    pub replicas: Vec<ReplicaProgress>,
}

impl PartitionProgress {
    /// Whether every in-sync replica holds `last_offset` (false for an empty ISR).
    pub fn isr_holds(&self, last_offset: i64) -> bool {
        let mut isr = self.replicas.iter().filter(|r| r.in_sync).peekable();
        isr.peek().is_some() && isr.all(|r| r.log_end_offset > last_offset)
    }

    /// Rule 1: the offset below which every assigned replica holds the data (`None` for no
    /// replicas): the least log end offset.
    pub fn held_below(&self) -> Option<i64> {
        self.replicas.iter().map(|r| r.log_end_offset).min()
    }

    /// Rule 1: whether every assigned replica holds `last_offset` (false for no replicas).
    pub fn all_hold(&self, last_offset: i64) -> bool {
        self.held_below().is_some_and(|b| b > last_offset)
    }
}

/// Where the GC learns replica progress (the leader's fetch tracking). `None`: not known here
/// (not the leader, topic gone); only age can delete then.
pub trait ReplicaProgressSource: Send + Sync {
    fn progress(&self, partition: &WalPartition) -> Option<PartitionProgress>;

    /// The effective `local.retention.ms` of the partition's topic (`-1`: keep forever);
    /// `None` when the topic is not known here (then [`GcConfig::local_retention_ms`]).
    fn local_retention_ms(&self, _partition: &WalPartition) -> Option<i64> {
        None
    }

    /// Rule 1: the last offset of the partition the long-term tier holds, for a topic with
    /// `remote.storage.enable=true`; `None` otherwise (not tiered, nothing copied yet, unknown).
    fn tiered_end(&self, _partition: &WalPartition) -> Option<i64> {
        None
    }

    /// Other brokers whose objects in this bucket this GC collects (rule 6): gone for good, and
    /// this broker the one to take over. Asked once per round. Default: none.
    fn gone_uploaders(&self) -> BTreeSet<i32> {
        BTreeSet::new()
    }
}

impl ReplicaProgressSource for HashMap<WalPartition, PartitionProgress> {
    fn progress(&self, partition: &WalPartition) -> Option<PartitionProgress> {
        self.get(partition).cloned()
    }
}

/// Publishes tombstones (null values) for metadata keys to `__remote_wal_log_metadata`.
#[async_trait]
pub trait TombstonePublisher: Send + Sync + std::fmt::Debug {
    async fn publish_tombstones(&self, keys: Vec<WalMetadataKey>) -> Result<()>;
}

/// An object as the GC tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedObject {
    pub object_key: String,
    /// The broker that uploaded it (this one, or another of the bucket: rule 6).
    pub uploader_broker_id: i32,
    pub state: WalObjectState,
    /// Latest upload time among its records (they share one PUT, so normally all equal).
    pub upload_time_ms: i64,
    /// The object's size in bytes, as its records state it.
    pub size: u64,
    /// Slice keys this object owns, with each slice's last offset.
    pub slices: BTreeMap<WalMetadataKey, i64>,
    /// In `DeletePending`: whether the DELETE already succeeded (only tombstones remain).
    pub object_deleted: bool,
}

/// Why an object was found deletable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// Every assigned replica holds every slice.
    ReplicasCaughtUp,
    /// Every slice is held by every assigned replica or by the long-term tier, the tier holding
    /// at least one of them.
    Tiered,
    /// Older than `local.retention.ms`.
    Retention,
    /// Already `DeletePending` from an earlier round (a retry).
    Retry,
    /// Uploaded by a broker gone for good (rule 6).
    UploaderGone,
}

/// What one partition's slices need, as one [`GcPlanner::plan`] round sees it.
#[derive(Debug, Clone, Copy)]
struct Needs {
    /// Every assigned replica holds the offsets below this.
    replicas_below: i64,
    /// The long-term tier holds the offsets below this.
    tier_below: i64,
    /// How long its slices are kept at most (rule 2).
    lifetime_ms: i64,
}

/// Rule 2: a slice's lifetime, from its topic's effective `local.retention.ms` (`None`: topic
/// not known here, then `fallback`; negative: forever), capped by `cap`.
pub fn lifetime_bound(local_retention_ms: Option<i64>, fallback: i64, cap: i64) -> i64 {
    let bound = match local_retention_ms.unwrap_or(fallback) {
        r if r < 0 => i64::MAX,
        r => r,
    };
    bound.min(cap)
}

/// The pure GC core (see the module docs).
#[derive(Debug)]
pub struct GcPlanner {
    config: GcConfig,
    bucket: String,
    objects: BTreeMap<String, TrackedObject>,
    /// Which tracked object owns each key.
    owners: HashMap<WalMetadataKey, String>,
    /// The base offsets of the owned keys, per partition ([`GcPlanner::held_from`]).
    by_partition: HashMap<WalPartition, BTreeSet<i64>>,
    /// Untracked objects found by the sweep and not yet deleted.
    orphans: BTreeSet<String>,
    /// Untracked objects past their grace in the last sweep (orphans if still so in the next).
    suspects: BTreeSet<String>,
    caught_up: bool,
    /// Other uploaders whose objects are collected here (rule 6), as of the last round.
    gone: BTreeSet<i32>,
}

impl GcPlanner {
    /// A planner for `config.broker_id`'s objects in `bucket`.
    pub fn new(config: GcConfig, bucket: impl Into<String>) -> Self {
        Self {
            config,
            bucket: bucket.into(),
            objects: BTreeMap::new(),
            owners: HashMap::new(),
            by_partition: HashMap::new(),
            orphans: BTreeSet::new(),
            suspects: BTreeSet::new(),
            caught_up: false,
            gone: BTreeSet::new(),
        }
    }

    pub fn config(&self) -> &GcConfig {
        &self.config
    }

    /// Whether `m`'s object is in this bucket under its uploader's key prefix (this broker's,
    /// or another's for rule 6).
    fn is_tracked_here(&self, m: &WalSliceMetadata) -> bool {
        m.bucket == self.bucket
            && WalObjectKey::parse(&m.object_key).is_ok_and(|k| k.broker_id == m.uploader_broker_id)
    }

    /// Rule 6: the other uploaders whose objects this GC collects (never this broker itself).
    pub fn set_gone_uploaders(&mut self, mut gone: BTreeSet<i32>) {
        gone.remove(&self.config.broker_id);
        self.gone = gone;
    }

    /// Whether objects under `broker_id`'s key prefix are this GC's to collect.
    fn collects(&self, broker_id: i32) -> bool {
        broker_id == self.config.broker_id || self.gone.contains(&broker_id)
    }

    /// The key prefixes the orphan sweep lists: this broker's, then the gone uploaders'.
    pub fn sweep_prefixes(&self) -> Vec<String> {
        std::iter::once(self.config.broker_id)
            .chain(self.gone.iter().copied())
            .map(WalObjectKey::broker_prefix)
            .collect()
    }

    /// Applies one record of the metadata topic (live or replayed).
    pub fn on_metadata(&mut self, event: &WalMetadataEvent) {
        match event {
            WalMetadataEvent::Upsert(m) => self.upsert(m),
            WalMetadataEvent::Tombstone(k) => self.disown(k, None),
        }
    }

    /// Records the uploader just got acknowledged (before the consumer sees them).
    pub fn on_published(&mut self, records: &[WalSliceMetadata]) {
        for m in records {
            self.upsert(m);
        }
    }

    fn upsert(&mut self, m: &WalSliceMetadata) {
        let key = m.key();
        if !self.is_tracked_here(m) {
            // Rule 5: the key now belongs to someone else's object.
            self.disown(&key, None);
            return;
        }
        self.disown(&key, Some(&m.object_key));
        self.orphans.remove(&m.object_key);
        let obj = self
            .objects
            .entry(m.object_key.clone())
            .or_insert_with(|| TrackedObject {
                object_key: m.object_key.clone(),
                uploader_broker_id: m.uploader_broker_id,
                state: WalObjectState::Published,
                upload_time_ms: m.upload_time_ms,
                size: m.object_size,
                slices: BTreeMap::new(),
                object_deleted: false,
            });
        obj.upload_time_ms = obj.upload_time_ms.max(m.upload_time_ms);
        obj.slices.insert(key, m.last_offset);
        self.own(key, &m.object_key);
    }

    fn own(&mut self, key: WalMetadataKey, object_key: &str) {
        self.owners.insert(key, object_key.to_string());
        self.by_partition
            .entry(WalPartition {
                topic_id: key.topic_id,
                partition: key.partition,
            })
            .or_default()
            .insert(key.base_offset);
    }

    fn unown(&mut self, key: &WalMetadataKey) {
        self.owners.remove(key);
        let wp = WalPartition {
            topic_id: key.topic_id,
            partition: key.partition,
        };
        if let Some(offsets) = self.by_partition.get_mut(&wp) {
            offsets.remove(&key.base_offset);
            if offsets.is_empty() {
                self.by_partition.remove(&wp);
            }
        }
    }

    /// Removes `key` from its current owner unless that owner is `keep`.
    fn disown(&mut self, key: &WalMetadataKey, keep: Option<&str>) {
        let Some(owner) = self.owners.get(key) else {
            return;
        };
        if Some(owner.as_str()) == keep {
            return;
        }
        let owner = owner.clone();
        self.unown(key);
        let Some(obj) = self.objects.get_mut(&owner) else {
            return;
        };
        obj.slices.remove(key);
        if obj.slices.is_empty() && obj.state == WalObjectState::Published {
            // Nothing of ours points at it any more: the orphan sweep takes over.
            self.objects.remove(&owner);
        } else if obj.slices.is_empty() && obj.object_deleted {
            self.objects.remove(&owner);
        }
    }

    /// Declares the metadata view complete (startup replay done); enables the orphan sweep.
    pub fn set_metadata_caught_up(&mut self) {
        self.caught_up = true;
    }

    pub fn is_metadata_caught_up(&self) -> bool {
        self.caught_up
    }

    /// Rules 1, 2 and 6: moves deletable `Published` objects to `DeletePending` and returns every
    /// `DeletePending` object (new and retried), oldest first, at most `max_deletes_per_round`.
    ///
    /// Cost: one pass over the tracked objects, one map lookup per slice until one is found
    /// still needed and young (usually the first); the progress source is asked once per
    /// partition per round.
    pub fn plan(
        &mut self,
        progress: &dyn ReplicaProgressSource,
        now_ms: i64,
    ) -> Vec<(String, DeleteReason)> {
        // Per partition: (offset below which every assigned replica holds the data, offset below
        // which the tier holds it, lifetime bound).
        let mut cache: HashMap<WalPartition, Needs> = HashMap::new();
        let (fallback, cap) = (self.config.local_retention_ms, self.config.max_retention_ms);
        let mut needs = |k: &WalMetadataKey| -> Needs {
            let wp = WalPartition {
                topic_id: k.topic_id,
                partition: k.partition,
            };
            *cache.entry(wp).or_insert_with(|| Needs {
                replicas_below: progress
                    .progress(&wp)
                    .and_then(|p| p.held_below())
                    .unwrap_or(i64::MIN),
                tier_below: progress
                    .tiered_end(&wp)
                    .map_or(i64::MIN, |e| e.saturating_add(1)),
                lifetime_ms: lifetime_bound(progress.local_retention_ms(&wp), fallback, cap),
            })
        };
        let mut out = Vec::new();
        for obj in self.objects.values_mut() {
            if out.len() >= self.config.max_deletes_per_round {
                break;
            }
            let mine = obj.uploader_broker_id == self.config.broker_id;
            let reason = match obj.state {
                WalObjectState::DeletePending => Some(DeleteReason::Retry),
                WalObjectState::Published if !mine => {
                    // Another broker's: only once it is gone for good, and never an object it
                    // may have just written (a fenced broker may still be running).
                    let old =
                        now_ms.saturating_sub(obj.upload_time_ms) > self.config.orphan_grace_ms;
                    (self.gone.contains(&obj.uploader_broker_id) && old)
                        .then_some(DeleteReason::UploaderGone)
                }
                WalObjectState::Published => {
                    let age = now_ms.saturating_sub(obj.upload_time_ms);
                    // The object outlives the longest-kept of its slices.
                    let mut lifetime = i64::MIN;
                    // Rule 1 over every slice: all held by the replicas, else by the tier.
                    let mut by_replicas = !obj.slices.is_empty();
                    let mut by_tier = !obj.slices.is_empty();
                    for (k, &last) in &obj.slices {
                        let n = needs(k);
                        lifetime = lifetime.max(n.lifetime_ms);
                        let replicas = n.replicas_below > last;
                        by_replicas &= replicas;
                        by_tier &= replicas || n.tier_below > last;
                        if !by_tier && age <= lifetime {
                            // Needed, and young enough to be kept: the rest changes nothing
                            // (an object kept for an absent replica costs one lookup a round).
                            break;
                        }
                    }
                    if obj.slices.is_empty() {
                        lifetime = lifetime_bound(None, fallback, cap);
                    }
                    if age > lifetime {
                        Some(DeleteReason::Retention)
                    } else if by_replicas {
                        Some(DeleteReason::ReplicasCaughtUp)
                    } else if by_tier {
                        Some(DeleteReason::Tiered)
                    } else {
                        None
                    }
                }
                _ => None,
            };
            if let Some(reason) = reason {
                obj.state = obj
                    .state
                    .transition(WalObjectState::DeletePending)
                    .unwrap_or(obj.state);
                out.push((obj.object_key.clone(), reason));
            }
        }
        out
    }

    /// The lowest offset of `partition` that this broker's tracked objects in its bucket hold
    /// (`None`: none). What the leader serves through the WAL path to a follower far behind;
    /// below it the classic fetch. Whole objects go in offset order per partition (they age and
    /// are held in that order), so the range from here to the newest upload has no holes other
    /// than ranges the uploader dropped, which the leader answers classically anyway.
    pub fn held_from(&self, partition: &WalPartition) -> Option<i64> {
        self.by_partition
            .get(partition)
            .and_then(|offsets| offsets.first().copied())
    }

    /// The tracked object, if any.
    pub fn object(&self, object_key: &str) -> Option<&TrackedObject> {
        self.objects.get(object_key)
    }

    /// Tracked objects (any state).
    pub fn tracked(&self) -> usize {
        self.objects.len()
    }

    /// This broker's own tracked objects not deleted yet, and their bytes.
    pub fn kept(&self) -> (usize, u64) {
        self.objects
            .values()
            .filter(|o| o.uploader_broker_id == self.config.broker_id && !o.object_deleted)
            .fold((0, 0), |(n, bytes), o| (n + 1, bytes + o.size))
    }

    /// Objects found orphaned and not yet deleted.
    pub fn orphans(&self) -> impl Iterator<Item = &str> {
        self.orphans.iter().map(String::as_str)
    }

    /// Step 2 done: returns the keys to tombstone (step 3).
    pub fn object_deleted(&mut self, object_key: &str) -> Vec<WalMetadataKey> {
        match self.objects.get_mut(object_key) {
            Some(obj) if obj.state == WalObjectState::DeletePending => {
                obj.object_deleted = true;
                obj.slices.keys().copied().collect()
            }
            _ => Vec::new(),
        }
    }

    /// Step 3 done: the object reaches `Deleted` and is forgotten.
    pub fn tombstoned(&mut self, object_key: &str) {
        let done = self
            .objects
            .get(object_key)
            .is_some_and(|o| o.object_deleted && o.state == WalObjectState::DeletePending);
        if !done {
            return;
        }
        if let Some(obj) = self.objects.remove(object_key) {
            debug_assert!(obj.state.transition(WalObjectState::Deleted).is_ok());
            for k in obj.slices.keys() {
                if self.owners.get(k).is_some_and(|o| o == object_key) {
                    self.unown(k);
                }
            }
        }
    }

    /// Rule 4: orphans among a listing of [`GcPlanner::sweep_prefixes`], at most `max_deletes_per_round`
    /// (empty until the metadata view is caught up): untracked objects past their grace that
    /// were already suspects in the previous sweep. Found orphans stay remembered until
    /// [`GcPlanner::orphan_deleted`].
    pub fn plan_orphans(&mut self, listing: &[ObjectMeta], now_ms: i64) -> Vec<String> {
        if !self.caught_up {
            return Vec::new();
        }
        let previous = std::mem::take(&mut self.suspects);
        let mut out = Vec::new();
        for meta in listing {
            if out.len() >= self.config.max_deletes_per_round {
                break;
            }
            let Ok(key) = WalObjectKey::parse(&meta.key) else {
                continue;
            };
            if !self.collects(key.broker_id) || self.objects.contains_key(&meta.key) {
                continue;
            }
            if now_ms.saturating_sub(key.created_ms) <= self.config.orphan_grace_ms {
                continue;
            }
            if !self.orphans.contains(&meta.key) && !previous.contains(&meta.key) {
                self.suspects.insert(meta.key.clone());
                continue;
            }
            self.orphans.insert(meta.key.clone());
            out.push(meta.key.clone());
        }
        out
    }

    /// An orphan's DELETE succeeded (`Orphaned → Deleted`).
    pub fn orphan_deleted(&mut self, object_key: &str) {
        self.orphans.remove(object_key);
    }
}

/// What one GC round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Objects whose DELETE succeeded this round.
    pub objects_deleted: usize,
    /// Tombstones published this round.
    pub tombstones: usize,
    /// Objects that reached `Deleted` (object gone and tombstones published).
    pub completed: usize,
    /// Orphans deleted by the sweep.
    pub orphans_deleted: usize,
    /// Store or publisher failures; the affected objects are retried next round.
    pub errors: usize,
}

/// The per-broker GC: [`GcPlanner`] plus DELETEs and tombstones. Cloning shares it.
#[derive(Debug, Clone)]
pub struct WalGc {
    planner: Arc<Mutex<GcPlanner>>,
    round: Arc<tokio::sync::Mutex<()>>,
    store: Arc<dyn ObjectStore>,
    publisher: Arc<dyn TombstonePublisher>,
    clock: SharedClock,
    /// DELETEs, tombstone publishes and sweeps that fail round after round while the bucket or
    /// the metadata topic is down: logged when they start, every few seconds, and when they end.
    failures: Arc<GcFailures>,
}

/// What the end of a run of failed orphan sweeps (listing or DELETE) is logged as.
const SWEEPS: &str = "remote WAL GC: orphan sweeps";

#[derive(Debug, Default)]
struct GcFailures {
    delete: FailureLog,
    tombstone: FailureLog,
    sweep: FailureLog,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the planner consistent, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WalGc {
    /// A GC for the objects `config.broker_id` uploaded to `store` (its own bucket).
    pub fn new(
        config: GcConfig,
        store: Arc<dyn ObjectStore>,
        publisher: Arc<dyn TombstonePublisher>,
        clock: SharedClock,
    ) -> Self {
        let planner = GcPlanner::new(config, store.bucket());
        Self {
            planner: Arc::new(Mutex::new(planner)),
            round: Arc::new(tokio::sync::Mutex::new(())),
            store,
            publisher,
            clock,
            failures: Arc::default(),
        }
    }

    /// See [`GcPlanner::on_metadata`].
    pub fn on_metadata(&self, event: &WalMetadataEvent) {
        lock(&self.planner).on_metadata(event);
    }

    /// See [`GcPlanner::on_published`].
    pub fn on_published(&self, records: &[WalSliceMetadata]) {
        lock(&self.planner).on_published(records);
    }

    /// See [`GcPlanner::set_metadata_caught_up`].
    pub fn set_metadata_caught_up(&self) {
        lock(&self.planner).set_metadata_caught_up();
    }

    /// See [`GcPlanner::held_from`].
    pub fn held_from(&self, partition: &WalPartition) -> Option<i64> {
        lock(&self.planner).held_from(partition)
    }

    /// Runs `f` on the planner (inspection, metrics).
    pub fn with_planner<R>(&self, f: impl FnOnce(&GcPlanner) -> R) -> R {
        f(&lock(&self.planner))
    }

    /// One retention round: plan, DELETE, tombstone (rules 1–3 and 6).
    pub async fn run_once(&self, progress: &dyn ReplicaProgressSource) -> GcReport {
        let _round = self.round.lock().await;
        let now = self.clock.now_ms();
        let gone = progress.gone_uploaders();
        // Each planned object, and whether an earlier round deleted it already (its tombstones
        // failed then), under one lock.
        let plan: Vec<_> = {
            let mut planner = lock(&self.planner);
            planner.set_gone_uploaders(gone);
            let planned = planner.plan(progress, now);
            planned
                .into_iter()
                .map(|(key, reason)| {
                    let deleted = planner.object(&key).is_some_and(|o| o.object_deleted);
                    (key, reason, deleted)
                })
                .collect()
        };
        let mut report = GcReport::default();
        // The round's objects go in one batch delete (S3 `DeleteObjects`), not one request each.
        let to_delete: Vec<String> = plan
            .iter()
            .filter(|(_, _, gone)| !gone)
            .map(|(key, _, _)| key.clone())
            .collect();
        // Keys whose DELETE failed, with the error; all of them when the request failed whole.
        let mut failed: HashMap<String, ObjStoreError> = HashMap::new();
        let mut request_failed = None;
        if !to_delete.is_empty() {
            match self.store.delete_many(&to_delete).await {
                Ok(refused) => failed.extend(refused),
                Err(e) => request_failed = Some(e),
            }
        }
        let mut to_tombstone: Vec<(String, Vec<WalMetadataKey>)> = Vec::new();
        // The round's first failed DELETE, with its error (one line a round).
        let mut first_failed = None;
        for (key, reason, gone) in plan {
            let error = (!gone)
                .then(|| failed.get(&key).or(request_failed.as_ref()))
                .flatten();
            if let Some(e) = error {
                first_failed.get_or_insert((key, reason, e));
                report.errors += 1;
                continue;
            }
            if !gone {
                report.objects_deleted += 1;
            }
            let keys = lock(&self.planner).object_deleted(&key);
            to_tombstone.push((key, keys));
        }
        match first_failed {
            Some((key, reason, error)) => {
                if let Some(not_logged) = self.failures.delete.failed() {
                    tracing::warn!(%key, ?reason, %error, objects = report.errors, not_logged,
                        "remote WAL GC: DELETE failed; retried next round");
                }
            }
            None if !to_delete.is_empty() => self.failures.delete.success("remote WAL GC: DELETEs"),
            None => {}
        }
        if to_tombstone.is_empty() {
            return report;
        }
        let keys: Vec<WalMetadataKey> = to_tombstone
            .iter()
            .flat_map(|(_, k)| k.iter().copied())
            .collect();
        let n = keys.len();
        let published = if keys.is_empty() {
            Ok(())
        } else {
            self.publisher.publish_tombstones(keys).await
        };
        match published {
            Ok(()) => {
                self.failures
                    .tombstone
                    .success("remote WAL GC: tombstone publishes");
                report.tombstones = n;
                let mut planner = lock(&self.planner);
                for (key, _) in &to_tombstone {
                    planner.tombstoned(key);
                    report.completed += 1;
                }
            }
            Err(e) => {
                if let Some(not_logged) = self.failures.tombstone.failed() {
                    tracing::warn!(error = %e, objects = to_tombstone.len(), not_logged,
                        "remote WAL GC: tombstone publish failed; retried next round");
                }
                report.errors += 1;
            }
        }
        report
    }

    /// Runs until `shutdown` completes: a retention round every `every`, and the orphan sweep
    /// every `sweep_every_rounds` rounds (at least 1). Timers use tokio time; decisions use the
    /// injected clock.
    pub async fn run<F: std::future::Future<Output = ()>>(
        &self,
        progress: &dyn ReplicaProgressSource,
        every: std::time::Duration,
        sweep_every_rounds: u32,
        shutdown: F,
    ) {
        tokio::pin!(shutdown);
        let sweep_every = sweep_every_rounds.max(1);
        let mut until_sweep = sweep_every;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(every) => {}
            }
            let r = self.run_once(progress).await;
            until_sweep -= 1;
            let swept = if until_sweep == 0 {
                until_sweep = sweep_every;
                self.sweep_orphans().await
            } else {
                GcReport::default()
            };
            tracing::debug!(?r, ?swept, "remote WAL GC round");
        }
    }

    /// The orphan sweep (rule 4): lists `wal/<broker-id>/` (and the prefixes of gone uploaders,
    /// rule 6, as of the last round) and deletes untracked objects older than the grace period.
    /// Does nothing until the metadata view is caught up.
    pub async fn sweep_orphans(&self) -> GcReport {
        let _round = self.round.lock().await;
        let mut report = GcReport::default();
        let (caught_up, prefixes) = {
            let p = lock(&self.planner);
            (p.is_metadata_caught_up(), p.sweep_prefixes())
        };
        if !caught_up {
            return report;
        }
        let mut listing = Vec::new();
        for prefix in prefixes {
            match self.store.list(&prefix).await {
                Ok(l) => listing.extend(l),
                Err(e) => {
                    // A partial listing would drop the other prefix's suspects: skip the sweep.
                    if let Some(not_logged) = self.failures.sweep.failed() {
                        tracing::warn!(%prefix, error = %e, not_logged,
                            "remote WAL GC: listing failed; sweep retried later");
                    }
                    report.errors += 1;
                    return report;
                }
            }
        }
        let now = self.clock.now_ms();
        let orphans = lock(&self.planner).plan_orphans(&listing, now);
        if orphans.is_empty() {
            self.failures.sweep.success(SWEEPS);
            return report;
        }
        let failed: HashMap<String, ObjStoreError> = match self.store.delete_many(&orphans).await {
            Ok(failed) => failed.into_iter().collect(),
            Err(e) => {
                if let Some(not_logged) = self.failures.sweep.failed() {
                    tracing::warn!(objects = orphans.len(), error = %e, not_logged,
                        "remote WAL GC: orphan DELETE failed; retried next sweep");
                }
                report.errors += orphans.len();
                return report;
            }
        };
        let mut first_failed = None;
        for key in orphans {
            match failed.get(&key) {
                None => {
                    lock(&self.planner).orphan_deleted(&key);
                    report.orphans_deleted += 1;
                }
                Some(e) => {
                    first_failed.get_or_insert((key, e));
                    report.errors += 1;
                }
            }
        }
        match first_failed {
            Some((key, e)) => {
                if let Some(not_logged) = self.failures.sweep.failed() {
                    tracing::warn!(%key, error = %e, objects = report.errors, not_logged,
                        "remote WAL GC: orphan DELETE failed; retried next sweep");
                }
            }
            None => self.failures.sweep.success(SWEEPS),
        }
        report
    }
}

#[cfg(test)]
#[path = "gc_test.rs"]
mod tests;
