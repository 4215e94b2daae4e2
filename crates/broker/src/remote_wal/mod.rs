//! The remote WAL (KIP-1176) wired into the broker: for topics with `remote.wal.enable=true`,
//! followers get their data through the object store of the leader's rack instead of by Fetch
//! across racks.
//!
//! The data's way (see `docs/architecture.md`):
//!
//! 1. **Leader** (`leader.rs`): after a local append of a remote-WAL partition the produce
//!    handler hands the batches, as stored, to the broker's one `Uploader`, which cuts an object
//!    of many partitions every `remote.wal.upload.interval.ms`, PUTs it into this rack's bucket
//!    (`store.rs`) and publishes one metadata record per slice (`publisher.rs`) to
//!    `__remote_wal_log_metadata`.
//! 2. **Metadata** (`crate::topic_follower`): every broker follows that topic, from its local
//!    replicas and, for partitions it hosts no replica of, by Fetch as a consumer, and
//!    feeds the records to its `WalFetcher` and its GC.
//! 3. **Follower** (`follower.rs`): the `WalFetcher` range-reads the slices of partitions
//!    followed here and appends them like a Fetch response. The replica fetcher keeps reporting
//!    the log end offset to the leader, asking for no record data while the partition is in WAL
//!    mode; it takes the classic fetch for ranges the WAL path cannot serve and returns by
//!    itself.
//! 4. **Lifecycle** (`gc.rs`): an object lives while some assigned replica of its partitions
//!    may need it: until every assigned replica holds its data, or the long-term tier does
//!    (`remote.storage.enable=true` topics), or it is older than its topics' effective
//!    `local.retention.ms` capped by `remote.wal.retention.max.ms`; then it is deleted and its
//!    metadata tombstoned. A follower that was offline (or a replica a reassignment added)
//!    catches up through the objects still there; orphans are swept.
//! 5. **Metrics** (`ferry_wal::metrics`), including an estimated cost per hour; the `remote.wal.*`
//!    keys are `ferry_config::remote_wal_config`.
//! 6. **Failover** (`republish.rs`): a broker that becomes leader at a new epoch re-uploads its
//!    recent local log to its own rack's bucket (`remote.wal.failover.republish`); followers skip
//!    the former leader's metadata (older epoch, unreadable object) and use these records.
//!    `optimized` leaves out what the long-term tier holds already.

/// A topic's effective `local.retention.ms` (KIP-405: -2 means `retention.ms`, and local never
/// exceeds it), `None` for keep forever: how long a new leader republishes, and how long the GC
/// keeps WAL objects at most.
fn local_retention_ms(
    config: &BrokerConfig,
    topic_configs: &std::collections::BTreeMap<String, String>,
) -> Option<i64> {
    let number = |key: &str| {
        ferry_config::topic_config::effective(config, topic_configs, key)
            .and_then(|(v, _)| v.trim().parse::<i64>().ok())
    };
    ferry_wal::republish::effective_local_retention(
        number("local.retention.ms").unwrap_or(-2),
        number("retention.ms").unwrap_or(-1),
    )
}

pub mod follower;
pub mod gc;
pub mod leader;
pub mod publisher;
pub mod republish;
pub mod store;
#[cfg(test)]
pub(crate) mod test_support;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use ferry_cluster::{BrokerId, Image};
use ferry_common::SharedClock;
use ferry_log::AppendInfo;
use ferry_objstore::Op;
use ferry_wal::fetcher::{FetcherConfig, WalFetcher};
use ferry_wal::gc::{GcConfig, WalGc};
use ferry_wal::leader_tracker::LeaderTracker;
use ferry_wal::metadata::{WalMetadataEvent, WalMetadataRecord};
use ferry_wal::stages::Stage;
use ferry_wal::uploader::{AppendOutcome, BatcherConfig, Uploader, UploaderConfig};
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;
use tokio::time::Instant;
use uuid::Uuid;

use crate::replica_manager::{Partition, Role};
use crate::topic_follower::{self, Followed, FollowedRecords};
use ferry_config::broker_config::BrokerConfig;
use ferry_config::remote_wal_config::{self as config, RemoteWalConfig};
use ferry_wal::cost::Totals;
use ferry_wal::metrics::{self, RemoteWalMetrics};
use follower::{FollowerModes, ReplicaSink};
use publisher::MetadataProducer;
use store::Stores;

/// State shared by the glue's parts.
#[derive(Debug)]
pub struct Shared {
    pub config: RemoteWalConfig,
    pub metrics: RemoteWalMetrics,
    /// The broker's handles (`None` in tests that run the WAL without a broker).
    host: Option<crate::host::HostHandles>,
    /// The long-term tier, when `remote.log.storage.system.enable` is on: what it holds ends
    /// the lifetime of WAL objects of tiered topics and is left out of an optimized republish.
    tier: Option<Arc<crate::tier::Tier>>,
    /// Topics with `remote.wal.enable=true`, by id.
    topics: RwLock<HashMap<Uuid, String>>,
}

impl Shared {
    /// The last offset of `p` the long-term tier holds, for a topic with
    /// `remote.storage.enable=true` (`None`: not tiered, nothing copied, tier metadata not read
    /// to its end yet).
    fn tiered_end(&self, p: &Partition) -> Option<i64> {
        let tier = self.tier.as_ref()?;
        if !p.log.is_tiered() || !tier.is_ready() {
            return None;
        }
        let end = tier.highest_copied_offset(p);
        (end >= 0).then_some(end)
    }

    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// This broker's replica of a remote-WAL topic's partition, found by the topic's name;
    /// callers check its topic id (a topic created again under the same name is another topic).
    fn hosted_partition(&self, topic_id: Uuid, partition: i32) -> Option<Arc<Partition>> {
        let name = self.topic_name(topic_id)?;
        self.host
            .as_ref()?
            .replicas()?
            .partition_of(&name, partition)
    }
}

/// Whether a topic's followers replicate through the remote WAL: its effective
/// `remote.wal.enable`, never for internal (`__`) topics. `__remote_wal_log_metadata` cannot
/// carry its own replication, and the offsets and transaction topics are small and wait on every
/// commit; a broker-wide `remote.wal.enable = true` had made all three WAL topics.
fn uses_wal(
    config: &ferry_config::broker_config::BrokerConfig,
    name: &str,
    configs: &std::collections::BTreeMap<String, String>,
) -> bool {
    !crate::broker::Broker::is_internal_topic(name)
        && ferry_config::topic_config::effective(config, configs, "remote.wal.enable")
            .is_some_and(|(v, _)| v == "true")
}

/// The broker's one remote WAL.
pub struct RemoteWal {
    shared: Arc<Shared>,
    clock: SharedClock,
    stores: Stores,
    uploader: Option<Uploader>,
    fetcher: Arc<WalFetcher>,
    gc: Option<WalGc>,
    publisher: Arc<MetadataProducer>,
    follower: FollowerModes,
    leader: Arc<Mutex<LeaderTracker>>,
    /// Per led partition: the leader epoch whose republish has been started.
    republished: Mutex<HashMap<ferry_common::TopicPartition, i32>>,
    /// Per led partition: (when, end offset) of appends not committed yet, for the `commit`
    /// stage.
    uncommitted: Mutex<HashMap<ferry_common::TopicPartition, VecDeque<(Instant, i64)>>>,
}

/// Appends remembered per partition for the `commit` stage; older ones are forgotten (they
/// only go unmeasured).
const MAX_UNCOMMITTED: usize = 4_096;

impl RemoteWal {
    /// The WAL over opened buckets (`Stores::open`), in the broker `host` describes, beside its
    /// long-term `tier` if any.
    pub fn with_stores(
        config: RemoteWalConfig,
        stores: Stores,
        metrics: RemoteWalMetrics,
        clock: SharedClock,
        host: Option<crate::host::HostHandles>,
        tier: Option<Arc<crate::tier::Tier>>,
    ) -> Self {
        let fallback_ms = config.fallback_ms;
        let shared = Arc::new(Shared {
            config,
            metrics,
            host,
            tier,
            topics: RwLock::new(HashMap::new()),
        });
        let c = &shared.config;
        shared
            .metrics
            .rack_info
            .get_or_create(&metrics::RackLabels {
                rack: c.rack.clone(),
            })
            .set(1);
        let leader = Arc::new(Mutex::new(LeaderTracker::new(fallback_ms)));
        let publisher = Arc::new(MetadataProducer::new(
            shared.clone(),
            leader.clone(),
            clock.clone(),
        ));
        let own = stores.own();
        let uploader = own.clone().map(|store| {
            Uploader::new(
                UploaderConfig {
                    batcher: BatcherConfig {
                        broker_id: c.node_id,
                        upload_interval_ms: c.upload_interval_ms,
                        upload_max_bytes: c.upload_max_bytes,
                        max_buffered_bytes: c.buffer_max_bytes,
                    },
                    stages: shared.metrics.stages.clone(),
                    ..UploaderConfig::default()
                },
                store,
                publisher.clone(),
                clock.clone(),
            )
        });
        let gc = own.map(|store| {
            WalGc::new(
                GcConfig {
                    broker_id: c.node_id,
                    local_retention_ms: c.retention_ms,
                    max_retention_ms: c.retention_max_ms,
                    orphan_grace_ms: c.orphan_grace_ms,
                    max_deletes_per_round: 1_000,
                },
                store,
                publisher.clone(),
                clock.clone(),
            )
        });
        if let Some(gc) = &gc {
            publisher.track_published_in(gc.clone());
        }
        let fetcher = Arc::new(
            WalFetcher::with_config(
                stores.resolver(),
                Arc::new(ReplicaSink::new(shared.clone())),
                FetcherConfig {
                    stages: shared.metrics.stages.clone(),
                    max_records_per_partition: shared.config.fetcher_queue_max_slices.max(1),
                    ..FetcherConfig::default()
                },
            )
            .with_clock(clock.clone()),
        );
        Self {
            shared,
            clock,
            stores,
            uploader,
            fetcher,
            gc,
            publisher,
            // The leader decides first, by what it published (`leader.rs`); a follower switches
            // on its own only when the leader's answers stop helping for much longer (a loaded
            // machine made followers switch after one window although the WAL path worked).
            follower: FollowerModes::new(fallback_ms.saturating_mul(4)),
            leader,
            republished: Mutex::new(HashMap::new()),
            uncommitted: Mutex::new(HashMap::new()),
        }
    }

    pub fn metrics(&self) -> &RemoteWalMetrics {
        &self.shared.metrics
    }

    pub fn register_metrics(&self, registry: &mut Registry) {
        self.shared.metrics.register(registry);
    }

    fn host(&self) -> Option<&crate::host::HostHandles> {
        self.shared.host.as_ref()
    }

    pub fn is_enabled(&self, topic_id: Uuid) -> bool {
        self.shared
            .topics
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&topic_id)
    }

    /// Follows a new metadata image: which topics use the WAL, which partitions this broker
    /// follows on it (their wal-mode flags).
    pub fn on_image(&self, image: &Image) {
        let Some(host) = self.host() else { return };
        let Some(replicas) = host.replicas() else {
            return;
        };
        let enabled: HashMap<Uuid, String> = image
            .topics
            .values()
            .filter(|t| uses_wal(&host.config, &t.name, &t.configs))
            .map(|t| (t.id, t.name.clone()))
            .collect();
        let any = !enabled.is_empty();
        *self
            .shared
            .topics
            .write()
            .unwrap_or_else(|p| p.into_inner()) = enabled;
        // Create the metadata topic as soon as a topic uses the WAL, so that its partitions
        // have leaders before the first upload.
        if any
            && image.topic(ferry_wal::metadata::METADATA_TOPIC).is_none()
            && self.uploader.is_some()
        {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let publisher = self.publisher.clone();
                rt.spawn(async move { publisher.ensure_topic_now().await });
            }
        }
        let mut followed = Vec::new();
        let mut led = std::collections::HashSet::new();
        for p in replicas.all() {
            let wal = self.is_enabled(p.topic_id);
            match p.role() {
                Role::Follower { leader } if wal && leader >= 0 => followed.push(p),
                Role::Leader if wal => {
                    led.insert(p.tp.clone());
                    p.set_wal_mode(false);
                    self.maybe_republish(&host.config, image, &p);
                }
                _ => p.set_wal_mode(false),
            }
        }
        self.leader_lock().retain(&led);
        self.uncommitted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|tp, _| led.contains(tp));
        self.republished
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|tp, _| led.contains(tp));
        self.follower.sync(&followed, self.clock.now_ms());
    }

    /// Leader of `p` at an epoch not seen before: starts handing the uploader the recent local
    /// log up to the epoch's start, stamped with the new epoch (see `republish.rs`).
    fn maybe_republish(&self, config: &BrokerConfig, image: &Image, p: &Arc<Partition>) {
        let Some(uploader) = &self.uploader else {
            return;
        };
        let Some((epoch, epoch_start)) = p.leader_epoch_start() else {
            return;
        };
        {
            let mut done = self.republished.lock().unwrap_or_else(|p| p.into_inner());
            if done.get(&p.tp) == Some(&epoch) {
                return;
            }
            done.insert(p.tp.clone(), epoch);
        }
        // A partition without other replicas has no follower to serve.
        if p.replicas().len() <= 1 {
            return;
        }
        let Some(topic) = image.topic(&p.tp.topic) else {
            return;
        };
        let local = local_retention_ms(config, &topic.configs);
        let Some(range) = ferry_wal::republish::republish_range(
            &p.log.segment_largest_timestamps(),
            p.log.log_start_offset(),
            epoch_start,
            self.clock.now_ms(),
            local,
        ) else {
            return;
        };
        // `optimized` (KIP-1176): what the long-term tier holds stays out; a follower needing it
        // fetches from this leader, or from the tier below its local log start. Topics that do
        // not tier, and a tier whose metadata is not read yet, republish from the high
        // watermark, which every replica in the ISR holds already.
        let kept = match self.shared.config.failover_republish {
            config::Republish::Optimized => {
                ferry_wal::republish::skip_tiered(range, self.shared.tiered_end(p))
                    .and_then(|r| ferry_wal::republish::skip_replicated(r, p.high_watermark()))
            }
            config::Republish::Comprehensive => Some(range),
        };
        let Some((from, to)) = kept else {
            tracing::info!(partition = %p.tp, epoch, from = range.0, to = range.1, high_watermark = p.high_watermark(),
                "new remote-WAL leader: the long-term tier and the replicas in sync hold everything to republish");
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::info!(partition = %p.tp, epoch, from, to, "new remote-WAL leader: republishing its local log");
        rt.spawn(republish::run(
            self.shared.clone(),
            uploader.clone(),
            p.clone(),
            epoch,
            from,
            to,
        ));
    }

    /// The `commit` stage: appends of `p` the high watermark has passed now.
    fn observe_commits(&self, p: &Partition) {
        let hw = p.high_watermark();
        let mut pending = self.uncommitted.lock().unwrap_or_else(|p| p.into_inner());
        let Some(q) = pending.get_mut(&p.tp) else {
            return;
        };
        while q.front().is_some_and(|(_, end)| *end <= hw) {
            if let Some((at, _)) = q.pop_front() {
                self.shared
                    .metrics
                    .stages
                    .observe(Stage::Commit, at.elapsed());
            }
        }
    }

    fn leader_lock(&self) -> std::sync::MutexGuard<'_, LeaderTracker> {
        self.leader.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take_fallbacks(&self) {
        let Some(uploader) = &self.uploader else {
            return;
        };
        let fallbacks = uploader.take_fallbacks();
        if fallbacks.is_empty() {
            return;
        }
        let mut l = self.leader_lock();
        for f in &fallbacks {
            tracing::debug!(partition = %f.tp, from = f.from_offset, end = f.end_offset, reason = ?f.reason, "remote WAL range left for the classic fetch");
            self.shared.metrics.fallback_ranges.inc();
            l.on_fallback(f);
        }
    }

    /// Starts the uploader, fetcher, metadata reader, GC and housekeeping tasks.
    pub fn spawn(self: &Arc<Self>, tasks: &mut JoinSet<()>) {
        if let Some(u) = self.uploader.clone() {
            tasks.spawn(async move { u.run(std::future::pending()).await });
        }
        let wal = self.clone();
        tasks.spawn(async move {
            let fetcher = wal.fetcher.clone();
            let on_report = |report: ferry_wal::fetcher::FetchReport| {
                wal.shared.metrics.on_fetch_report(&report);
                let replicas = wal.host().and_then(crate::host::HostHandles::replicas);
                let switched = wal.follower.on_report(&report, |topic_id, partition| {
                    let name = wal.shared.topic_name(topic_id)?;
                    replicas.as_ref()?.partition_of(&name, partition)
                });
                wal.shared.metrics.classic_switches.inc_by(switched);
            };
            fetcher
                .run(
                    Duration::from_millis(100),
                    on_report,
                    std::future::pending(),
                )
                .await;
        });
        if let Some(host) = self.host() {
            let followed = Followed {
                topic: ferry_wal::metadata::METADATA_TOPIC,
                purpose: ferry_metrics::PURPOSE_WAL_METADATA_READER,
                kind: ferry_metrics::TrafficKind::WalMetadataReader,
            };
            tasks.spawn(topic_follower::run(self.clone(), followed, host.clone()));
        }
        if let Some(gc) = self.gc.clone() {
            tasks.spawn(gc::run(gc, self.shared.clone(), self.clock.clone()));
        }
        tasks.spawn(housekeeping(self.clone()));
    }

    /// The counters behind the cost estimate.
    fn totals(&self, host: &crate::host::HostHandles) -> Totals {
        let m = &self.shared.metrics.objstore;
        let mut t = Totals::default();
        for bucket in self.stores.buckets() {
            t.puts += m.requests(Op::PutIfAbsent, &bucket, "ok")
                + m.requests(Op::Put, &bucket, "ok")
                + m.requests(Op::List, &bucket, "ok");
            t.gets += m.requests(Op::GetRange, &bucket, "ok")
                + m.requests(Op::Get, &bucket, "ok")
                + m.requests(Op::Head, &bucket, "ok");
            t.bytes_up += m.bytes(Op::PutIfAbsent, &bucket, "upload");
            t.bytes_down += m.bytes(Op::GetRange, &bucket, "download");
        }
        t.cross_az_bytes = host.metrics.cross_rack_bytes(&self.shared.config.rack);
        t
    }
}

/// Every 100 ms: uploader fallbacks to the leader tracker, follower stall checks; every second
/// the cost gauges.
async fn housekeeping(wal: Arc<RemoteWal>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    loop {
        tick.tick().await;
        n += 1;
        wal.take_fallbacks();
        if let Some(u) = &wal.uploader {
            let held = i64::try_from(u.buffered_bytes()).unwrap_or(i64::MAX);
            wal.shared.metrics.uploader_buffered_bytes.set(held);
        }
        let awaiting = wal.fetcher.partitions_awaiting_reread();
        wal.shared
            .metrics
            .partitions_awaiting_reread
            .set(i64::try_from(awaiting).unwrap_or(i64::MAX));
        let Some(host) = wal.host() else { return };
        let Some(replicas) = host.replicas() else {
            return;
        };
        let now = wal.clock.now_ms();
        let followed: Vec<Arc<Partition>> = replicas
            .all()
            .into_iter()
            .filter(|p| wal.is_enabled(p.topic_id) && !p.is_leader())
            .collect();
        let switched = wal.follower.tick(&followed, now);
        wal.shared.metrics.classic_switches.inc_by(switched);
        if n.is_multiple_of(10) {
            let mut l = wal.leader_lock();
            for p in replicas.all() {
                if p.is_leader() && wal.is_enabled(p.topic_id) {
                    let min = p.replica_progress().iter().map(|r| r.1).min().unwrap_or(0);
                    l.prune(&p.tp, min);
                }
            }
            drop(l);
            if let Some(gc) = &wal.gc {
                let (objects, bytes) = gc.with_planner(|p| p.kept());
                let m = &wal.shared.metrics;
                m.kept_objects
                    .set(i64::try_from(objects).unwrap_or(i64::MAX));
                m.kept_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            let totals = wal.totals(host);
            wal.shared
                .metrics
                .update_cost(&wal.shared.config.cost, totals, now);
        }
    }
}

/// Decodes whole batches; returns the records at or after `from` as (offset, key, value) and
/// the next offset to read (after the last batch). An undecodable read is skipped, logged.
fn decode(records: Bytes, from: i64) -> (Vec<(i64, Bytes, Option<Bytes>)>, i64) {
    let mut out = Vec::new();
    let next = ferry_log::keyed_records::for_each_record(records, from, |r| {
        if let Some(key) = r.key {
            out.push((r.offset, key, r.value));
        }
    });
    match next {
        Ok(next) => (out, next),
        Err(e) => {
            tracing::warn!(error = %e, "undecodable remote WAL metadata batch skipped");
            (Vec::new(), from)
        }
    }
}

/// Every broker follows `__remote_wal_log_metadata` (`crate::topic_follower`).
impl FollowedRecords for RemoteWal {
    /// Feeds a read of metadata partition `partition` to the fetcher and the GC. While a
    /// follower catches up on more than its fetcher's queue holds for a partition, the rest
    /// of that partition's records is read again later (`reread_from`; the other partitions'
    /// records are taken as they come). The GC sees every record once, as it comes, whatever
    /// the fetcher took: it must know of this broker's own objects at once, or its orphan
    /// sweep would take them for orphans.
    fn feed(&self, partition: i32, records: Bytes, from: i64) -> i64 {
        let (recs, next) = decode(records, from);
        let events: Vec<(i64, WalMetadataEvent)> = recs
            .iter()
            .filter_map(|(offset, k, v)| match WalMetadataRecord::decode(k, v.as_deref()) {
                Ok(e) => Some((*offset, e)),
                Err(e) => {
                    // A lost record only costs a classic fetch.
                    tracing::warn!(offset, error = %e, "undecodable remote WAL metadata record skipped");
                    None
                }
            })
            .collect();
        if let Some(gc) = &self.gc {
            let new_from = self.fetcher.metadata_read_to(partition);
            for (_, e) in events.iter().filter(|(offset, _)| *offset >= new_from) {
                gc.on_metadata(e);
            }
        }
        if self
            .fetcher
            .on_metadata_read(partition, events, from, next)
            .queue_full
        {
            self.shared.metrics.metadata_held_back.inc();
        }
        next
    }

    fn reread_from(&self, partition: i32) -> Option<i64> {
        self.fetcher.reread_from(partition)
    }

    fn gone_below(&self, partition: i32, offset: i64) {
        self.fetcher.metadata_gone_below(partition, offset);
    }

    /// The GC's orphan sweep waits for this: an object is an orphan only if no metadata
    /// names it, which is known once the topic has been read to its end.
    fn caught_up(&self) {
        if let Some(gc) = &self.gc {
            gc.set_metadata_caught_up();
        }
    }
}

impl crate::replica_manager::ReplicationObserver for RemoteWal {
    /// Leader: `info` was just appended to `p`; offers the batches, as stored, to the uploader.
    /// Never blocks on the store. Called with the partition's append order kept.
    fn on_leader_append(&self, p: &Partition, info: &AppendInfo) {
        if info.duplicate || !self.is_enabled(p.topic_id) {
            return;
        }
        let Some(uploader) = &self.uploader else {
            return;
        };
        let now = self.clock.now_ms();
        self.leader_lock()
            .on_append(&p.tp, info.last_offset + 1, now);
        {
            let mut pending = self.uncommitted.lock().unwrap_or_else(|p| p.into_inner());
            let q = pending.entry(p.tp.clone()).or_default();
            if q.len() >= MAX_UNCOMMITTED {
                q.pop_front();
            }
            q.push_back((Instant::now(), info.last_offset + 1));
        }
        let Some(append) = leader::stored_append(p, info) else {
            return;
        };
        let outcome = uploader.append(append);
        if let AppendOutcome::Dropped { .. } = outcome {
            self.take_fallbacks();
        }
    }

    /// Leader: a follower's WAL-mode report (a replica fetch asking for no data) for `p` at
    /// `fetch_offset`. Returns whether to answer it with data (the classic fetch) because it
    /// is behind or inside a range the WAL path dropped.
    fn on_replica_report(&self, p: &Partition, replica: BrokerId, fetch_offset: i64) -> bool {
        if !self.is_enabled(p.topic_id) {
            return true;
        }
        let now = self.clock.now_ms();
        let leo = p.log.log_end_offset();
        // How far back this leader's objects still reach: a follower far behind above that
        // catches up through them (issue 14), in the ISR or not (issue 10: at full load a
        // follower in the ISR can fall far behind while its WAL path keeps delivering).
        let view = ferry_wal::leader_tracker::FollowerView {
            held_from: self.gc.as_ref().and_then(|gc| {
                gc.held_from(&ferry_wal::uploader::WalPartition {
                    topic_id: p.topic_id,
                    partition: p.tp.partition,
                })
            }),
            in_isr: p.isr().contains(&replica),
        };
        let reason =
            self.leader_lock()
                .on_report_held(&p.tp, replica, fetch_offset, leo, now, view);
        self.observe_commits(p);
        if let Some(reason) = reason {
            tracing::debug!(partition = %p.tp, replica, fetch_offset, leader_log_end = leo, reason = reason.as_str(),
                "remote WAL: report answered by the classic fetch");
            self.shared
                .metrics
                .reports_served_classic
                .get_or_create(&metrics::ReasonLabels {
                    reason: reason.as_str().to_string(),
                })
                .inc();
        }
        reason.is_some()
    }

    /// Follower: counts bytes the classic fetch appended to a remote-WAL partition.
    fn on_classic_follower_append(&self, p: &Partition, bytes: u64) {
        if self.is_enabled(p.topic_id) {
            self.shared.metrics.follower_bytes("classic", bytes);
            // Back to the WAL path as soon as the classic range is done.
            if !p.wal_mode() {
                self.follower.tick_one(p, self.clock.now_ms());
            }
        }
    }

    fn on_wal_progress_reported(&self, elapsed: Duration) {
        self.shared.metrics.stages.observe(Stage::Report, elapsed);
    }
}

#[cfg(test)]
mod uses_wal_tests {
    use std::collections::BTreeMap;

    use ferry_config::broker_config::BrokerConfig;

    use super::uses_wal;

    /// A broker-wide `remote.wal.enable = true` makes user topics WAL topics but never the
    /// internal ones (librdkafka's suite on such a cluster saw the metadata topic replicate
    /// through itself, and offset commits wait for `remote.wal.fallback.ms`).
    #[test]
    fn internal_topics_never_use_the_wal() {
        let none = BTreeMap::new();
        let mut c = BrokerConfig::default();
        assert!(!uses_wal(&c, "orders", &none));
        c.set("remote.wal.enable", "true").unwrap();
        assert!(uses_wal(&c, "orders", &none));
        for internal in [
            "__consumer_offsets",
            "__transaction_state",
            ferry_wal::metadata::METADATA_TOPIC,
        ] {
            assert!(!uses_wal(&c, internal, &none), "{internal}");
        }
        let off = BTreeMap::from([("remote.wal.enable".to_string(), "false".to_string())]);
        assert!(!uses_wal(&c, "orders", &off));
    }
}
