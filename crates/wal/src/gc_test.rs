//! Retention by replica progress and by age, delete-then-tombstone with retries, orphan sweep.

use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use ferry_common::ManualClock;
use ferry_objstore::{FaultKind, FaultyStore, MemoryStore, Op};
use uuid::Uuid;

use super::*;
use crate::error::WalError;

const BROKER: i32 = 1;

fn tid(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

fn okey(created_ms: i64, seq: u64) -> String {
    WalObjectKey::new(BROKER, created_ms, seq)
        .map(|k| k.to_string())
        .unwrap_or_default()
}

fn slice(object_key: &str, p: i32, base: i64, last: i64, upload_ms: i64) -> WalSliceMetadata {
    WalSliceMetadata {
        bucket: "az1".into(),
        object_key: object_key.into(),
        byte_position: 8 + p as u64 * 100,
        byte_length: 100,
        topic_id: tid(1),
        partition: p,
        base_offset: base,
        last_offset: last,
        leader_epoch: 3,
        slice_crc: 0,
        object_size: 1 << 20,
        uploader_broker_id: BROKER,
        upload_time_ms: upload_ms,
    }
}

fn wp(p: i32) -> WalPartition {
    WalPartition {
        topic_id: tid(1),
        partition: p,
    }
}

fn replica(broker_id: i32, log_end_offset: i64, in_sync: bool) -> ReplicaProgress {
    ReplicaProgress {
        broker_id,
        log_end_offset,
        in_sync,
    }
}

fn progress(parts: &[(i32, &[ReplicaProgress])]) -> HashMap<WalPartition, PartitionProgress> {
    parts
        .iter()
        .map(|(p, r)| {
            (
                wp(*p),
                PartitionProgress {
                    replicas: r.to_vec(),
                },
            )
        })
        .collect()
}

fn config() -> GcConfig {
    GcConfig {
        broker_id: BROKER,
        local_retention_ms: 60_000,
        max_retention_ms: i64::MAX,
        orphan_grace_ms: 10_000,
        max_deletes_per_round: 100,
    }
}

#[test]
fn deletable_only_when_every_assigned_replica_holds_every_slice() {
    let o = okey(1_000, 0);
    let cases: Vec<(&str, HashMap<WalPartition, PartitionProgress>, bool)> = vec![
        (
            "all ISR replicas past both slices",
            progress(&[
                (0, &[replica(1, 50, true), replica(2, 10, true)]),
                (1, &[replica(1, 50, true), replica(3, 21, true)]),
            ]),
            true,
        ),
        (
            "a lagging ISR replica still needs partition 1's slice (LEO == last offset)",
            progress(&[
                (0, &[replica(1, 50, true), replica(2, 10, true)]),
                (1, &[replica(1, 50, true), replica(3, 20, true)]),
            ]),
            false,
        ),
        (
            "an out-of-sync replica (offline, or far behind) is waited for: it catches up from here",
            progress(&[
                (0, &[replica(1, 50, true), replica(2, 0, false)]),
                (1, &[replica(1, 50, true), replica(3, 21, true)]),
            ]),
            false,
        ),
        (
            "an assigned replica the leader has not heard from yet (-1) is waited for",
            progress(&[
                (0, &[replica(1, 50, true), replica(2, -1, false)]),
                (1, &[replica(1, 50, true), replica(3, 21, true)]),
            ]),
            false,
        ),
        (
            "unknown partition (not the leader any more): only age can delete",
            progress(&[(0, &[replica(1, 50, true)])]),
            false,
        ),
        (
            "no replicas never count as held",
            progress(&[(0, &[replica(1, 50, true)]), (1, &[])]),
            false,
        ),
    ];
    for (rule, prog, want) in cases {
        let mut p = GcPlanner::new(config(), "az1");
        p.on_published(&[slice(&o, 0, 0, 9, 1_000), slice(&o, 1, 5, 20, 1_000)]);
        let plan = p.plan(&prog, 2_000);
        let got = plan == vec![(o.clone(), DeleteReason::ReplicasCaughtUp)];
        assert_eq!(got, want, "{rule}: {plan:?}");
        let state = p.object(&o).map(|t| t.state);
        let want_state = if want {
            WalObjectState::DeletePending
        } else {
            WalObjectState::Published
        };
        assert_eq!(state, Some(want_state), "{rule}");
    }
}

#[test]
fn deletable_by_age_whatever_the_replicas_hold() {
    let o = okey(1_000, 0);
    let mut p = GcPlanner::new(config(), "az1");
    p.on_metadata(&WalMetadataEvent::Upsert(slice(&o, 0, 0, 9, 1_000)));
    let lagging = progress(&[(0, &[replica(1, 10, true), replica(2, 0, true)])]);
    assert!(
        p.plan(&lagging, 61_000).is_empty(),
        "exactly at retention: kept"
    );
    assert_eq!(
        p.plan(&lagging, 61_001),
        vec![(o.clone(), DeleteReason::Retention)]
    );
    assert_eq!(
        p.plan(&lagging, 61_002),
        vec![(o, DeleteReason::Retry)],
        "stays pending until done"
    );
}

/// Progress plus each topic's effective `local.retention.ms`.
struct WithRetention(HashMap<WalPartition, PartitionProgress>, HashMap<Uuid, i64>);

impl ReplicaProgressSource for WithRetention {
    fn progress(&self, partition: &WalPartition) -> Option<PartitionProgress> {
        self.0.get(partition).cloned()
    }
    fn local_retention_ms(&self, partition: &WalPartition) -> Option<i64> {
        self.1.get(&partition.topic_id).copied()
    }
}

#[test]
fn age_follows_the_longest_local_retention_of_the_slices_topics() {
    let o = okey(1_000, 0);
    let mut p = GcPlanner::new(config(), "az1");
    let mut other_topic = slice(&o, 1, 0, 9, 1_000);
    other_topic.topic_id = tid(2);
    p.on_metadata(&WalMetadataEvent::Upsert(slice(&o, 0, 0, 9, 1_000)));
    p.on_metadata(&WalMetadataEvent::Upsert(other_topic));
    let lagging = progress(&[(0, &[replica(1, 10, true), replica(2, 0, true)])]);
    let source = WithRetention(
        lagging.clone(),
        HashMap::from([(tid(1), 5_000), (tid(2), 20_000)]),
    );
    assert!(
        p.plan(&source, 20_000).is_empty(),
        "topic 2 keeps its data 20 s"
    );
    assert_eq!(
        p.plan(&source, 21_001),
        vec![(o.clone(), DeleteReason::Retention)]
    );

    // -1: kept forever (until the replicas hold it); an unknown topic: the configured bound.
    let mut p = GcPlanner::new(config(), "az1");
    p.on_metadata(&WalMetadataEvent::Upsert(slice(&o, 0, 0, 9, 1_000)));
    let forever = WithRetention(lagging.clone(), HashMap::from([(tid(1), -1)]));
    assert!(p.plan(&forever, i64::MAX / 2).is_empty());
    let unknown = WithRetention(lagging, HashMap::new());
    assert_eq!(p.plan(&unknown, 61_001), vec![(o, DeleteReason::Retention)]);
}

/// Progress, retention and what the long-term tier holds (last offset per partition).
struct WithTier(WithRetention, HashMap<WalPartition, i64>);

impl ReplicaProgressSource for WithTier {
    fn progress(&self, partition: &WalPartition) -> Option<PartitionProgress> {
        self.0.progress(partition)
    }
    fn local_retention_ms(&self, partition: &WalPartition) -> Option<i64> {
        self.0.local_retention_ms(partition)
    }
    fn tiered_end(&self, partition: &WalPartition) -> Option<i64> {
        self.1.get(partition).copied()
    }
}

/// Issue 14: a follower that is offline keeps the objects of its partitions (it catches up
/// through them when it returns), but only up to the lifetime bound; capped by
/// `max_retention_ms` whatever `local.retention.ms` says (7 days by default through -2).
#[test]
fn an_offline_replica_keeps_objects_only_up_to_the_capped_retention() {
    let o = okey(1_000, 0);
    let week = 7 * 24 * 3_600_000;
    let offline = progress(&[(
        0,
        &[
            replica(1, 50, true),
            replica(2, 50, true),
            replica(3, 0, false),
        ],
    )]);
    let source = WithRetention(offline, HashMap::from([(tid(1), week)]));
    let mut uncapped = GcPlanner::new(config(), "az1");
    uncapped.on_published(&[slice(&o, 0, 0, 9, 1_000)]);
    assert!(
        uncapped.plan(&source, 1_000 + 3_600_001).is_empty(),
        "no cap: kept for the topic's retention"
    );
    let mut capped = GcPlanner::new(
        GcConfig {
            max_retention_ms: 3_600_000,
            ..config()
        },
        "az1",
    );
    capped.on_published(&[slice(&o, 0, 0, 9, 1_000)]);
    assert!(capped.plan(&source, 1_000 + 3_600_000).is_empty());
    assert_eq!(
        capped.plan(&source, 1_000 + 3_600_001),
        vec![(o, DeleteReason::Retention)]
    );
    assert_eq!(lifetime_bound(Some(-1), 5, 100), 100);
    assert_eq!(lifetime_bound(None, 5, 100), 5);
    assert_eq!(lifetime_bound(Some(7), 5, i64::MAX), 7);
}

/// Issue 14 (KIP-1176 "as soon as the log content is uploaded onto slow object storage"): on a
/// tiered topic an object goes once every slice is in the tier or held by every replica.
#[test]
fn an_object_goes_once_the_tier_holds_what_some_replica_lacks() {
    let o = okey(1_000, 0);
    let lagging = progress(&[
        (0, &[replica(1, 50, true), replica(2, 0, false)]),
        (1, &[replica(1, 50, true), replica(2, 50, true)]),
    ]);
    let mut p = GcPlanner::new(config(), "az1");
    p.on_published(&[slice(&o, 0, 0, 9, 1_000), slice(&o, 1, 5, 20, 1_000)]);
    let tier = |ends: &[(i32, i64)]| {
        WithTier(
            WithRetention(lagging.clone(), HashMap::new()),
            ends.iter().map(|(n, e)| (wp(*n), *e)).collect(),
        )
    };
    assert!(p.plan(&tier(&[]), 2_000).is_empty(), "not tiered: kept");
    assert!(
        p.plan(&tier(&[(0, 8)]), 2_000).is_empty(),
        "the tier lacks offset 9"
    );
    assert!(
        p.plan(&tier(&[(1, 100)]), 2_000).is_empty(),
        "partition 1 was held anyway; 0 is the one lacking"
    );
    assert_eq!(
        p.plan(&tier(&[(0, 9)]), 2_000),
        vec![(o, DeleteReason::Tiered)]
    );
}

/// The leader serves a far-behind follower through the WAL from the lowest offset its
/// objects hold; that moves up as objects go and is forgotten with the last one.
#[test]
fn held_from_follows_the_objects_tracked() {
    let (a, b) = (okey(1_000, 0), okey(2_000, 1));
    let mut p = GcPlanner::new(config(), "az1");
    assert_eq!(p.held_from(&wp(0)), None);
    p.on_published(&[slice(&a, 0, 0, 9, 1_000), slice(&a, 1, 0, 4, 1_000)]);
    p.on_published(&[slice(&b, 0, 10, 19, 2_000)]);
    assert_eq!(p.held_from(&wp(0)), Some(0));
    assert_eq!(p.held_from(&wp(1)), Some(0));
    let caught_up = progress(&[
        (0, &[replica(1, 15, true), replica(2, 15, true)]),
        (1, &[replica(1, 5, true), replica(2, 5, true)]),
    ]);
    assert_eq!(
        p.plan(&caught_up, 3_000),
        vec![(a.clone(), DeleteReason::ReplicasCaughtUp)]
    );
    let keys = p.object_deleted(&a);
    assert_eq!(keys.len(), 2);
    p.tombstoned(&a);
    assert_eq!(p.held_from(&wp(0)), Some(10));
    assert_eq!(p.held_from(&wp(1)), None);
    assert_eq!(
        p.kept(),
        (1, 1 << 20),
        "object b, as big as its records say"
    );
}

#[test]
fn only_this_brokers_objects_in_its_bucket_are_tracked() {
    let mut p = GcPlanner::new(config(), "az1");
    let mut other_broker = slice(&okey(1_000, 0), 0, 0, 9, 0);
    other_broker.uploader_broker_id = 2;
    let mut other_bucket = slice(&okey(1_000, 1), 0, 10, 19, 0);
    other_bucket.bucket = "az2".into();
    p.on_published(&[other_broker, other_bucket]);
    assert_eq!(p.tracked(), 0);
}

#[test]
fn a_republished_key_is_not_tombstoned_by_the_old_object() {
    let mine = okey(1_000, 0);
    let mut p = GcPlanner::new(config(), "az1");
    p.on_published(&[slice(&mine, 0, 0, 9, 0), slice(&mine, 1, 0, 9, 0)]);
    let mut republished = slice("wal/2/0000000005000-0000000000.wal", 0, 0, 9, 5_000);
    republished.uploader_broker_id = 2;
    republished.bucket = "az2".into();
    p.on_metadata(&WalMetadataEvent::Upsert(republished));
    let plan = p.plan(&HashMap::new(), 100_000);
    assert_eq!(plan.len(), 1);
    let keys = p.object_deleted(&mine);
    assert_eq!(keys.len(), 1, "only partition 1's key is still ours");
    assert_eq!(keys[0].partition, 1);
    // An object that loses every key is left to the orphan sweep.
    p.on_metadata(&WalMetadataEvent::Tombstone(keys[0]));
    p.tombstoned(&mine);
    assert_eq!(p.tracked(), 0);
}

#[derive(Debug, Default)]
struct Tombstones {
    published: Mutex<Vec<WalMetadataKey>>,
    fail_next: AtomicU32,
}

#[async_trait]
impl TombstonePublisher for Tombstones {
    async fn publish_tombstones(&self, keys: Vec<WalMetadataKey>) -> Result<()> {
        if self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(WalError::Invalid("metadata topic unavailable".into()));
        }
        lock(&self.published).extend(keys);
        Ok(())
    }
}

struct Fixture {
    clock: Arc<ManualClock>,
    mem: MemoryStore,
    faults: ferry_objstore::FaultController,
    tombstones: Arc<Tombstones>,
    gc: WalGc,
}

fn fixture() -> Fixture {
    let clock = ManualClock::new(100_000);
    let mem = MemoryStore::with_clock("az1", clock.clone());
    let faulty = FaultyStore::new(mem.clone(), 7);
    let faults = faulty.controller();
    let tombstones = Arc::new(Tombstones::default());
    let gc = WalGc::new(
        config(),
        Arc::new(faulty),
        tombstones.clone(),
        clock.clone(),
    );
    Fixture {
        clock,
        mem,
        faults,
        tombstones,
        gc,
    }
}

async fn put(mem: &MemoryStore, key: &str) {
    assert!(mem.put(key, Bytes::from_static(b"obj")).await.is_ok());
}

async fn exists(mem: &MemoryStore, key: &str) -> bool {
    matches!(mem.head(key).await, Ok(Some(_)))
}

#[tokio::test]
async fn delete_then_tombstone_every_slice_then_forget() {
    let f = fixture();
    let o = okey(99_000, 0);
    put(&f.mem, &o).await;
    f.gc.on_published(&[slice(&o, 0, 0, 9, 99_000), slice(&o, 1, 0, 4, 99_000)]);
    let lagging = progress(&[
        (0, &[replica(1, 10, true), replica(2, 10, true)]),
        (1, &[replica(1, 5, true), replica(2, 3, true)]),
    ]);
    assert_eq!(f.gc.run_once(&lagging).await, GcReport::default());
    assert!(
        exists(&f.mem, &o).await,
        "a lagging ISR replica still needs it"
    );

    let caught_up = progress(&[
        (0, &[replica(1, 10, true), replica(2, 10, true)]),
        (1, &[replica(1, 5, true), replica(2, 5, true)]),
    ]);
    let r = f.gc.run_once(&caught_up).await;
    assert_eq!((r.objects_deleted, r.tombstones, r.completed), (1, 2, 1));
    assert!(!exists(&f.mem, &o).await);
    let published = lock(&f.tombstones.published).clone();
    assert_eq!(
        published.iter().map(|k| k.partition).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(f.gc.with_planner(GcPlanner::tracked), 0);
}

#[tokio::test]
async fn store_and_publisher_errors_are_retried_without_losing_track() {
    let f = fixture();
    let o = okey(10_000, 0);
    put(&f.mem, &o).await;
    f.gc.on_published(&[slice(&o, 0, 0, 9, 10_000)]);
    let none = HashMap::new();

    f.faults.fail_next(Op::Delete, 1, FaultKind::Unavailable);
    let r = f.gc.run_once(&none).await;
    assert_eq!((r.objects_deleted, r.errors), (0, 1));
    assert!(exists(&f.mem, &o).await);
    assert_eq!(
        f.gc.with_planner(|p| p.object(&o).map(|t| t.state)),
        Some(WalObjectState::DeletePending)
    );

    f.tombstones.fail_next.store(1, Ordering::SeqCst);
    let r = f.gc.run_once(&none).await;
    assert_eq!((r.objects_deleted, r.tombstones, r.errors), (1, 0, 1));
    assert!(!exists(&f.mem, &o).await, "deleted first");
    assert!(
        f.gc.with_planner(|p| p.object(&o).is_some_and(|t| t.object_deleted)),
        "still tracked for its tombstones"
    );

    f.clock.advance(1_000);
    let r = f.gc.run_once(&none).await;
    assert_eq!(
        (r.objects_deleted, r.tombstones, r.completed, r.errors),
        (0, 1, 1, 0),
        "only the tombstones are retried"
    );
    assert_eq!(f.gc.with_planner(GcPlanner::tracked), 0);
}

#[tokio::test(start_paused = true)]
async fn failed_deletes_are_one_line_a_round_and_quiet_while_the_bucket_stays_down() {
    let lines = crate::log_capture::LogLines::default();
    let _capture = lines.capture();
    let f = fixture();
    let objects: Vec<String> = (0..3).map(|seq| okey(10_000, seq)).collect();
    for (p, o) in objects.iter().enumerate() {
        put(&f.mem, o).await;
        f.gc.on_published(&[slice(o, p as i32, 0, 9, 10_000)]);
    }
    let none = HashMap::new();
    f.faults.set_unavailable(true);
    for _ in 0..3 {
        let r = f.gc.run_once(&none).await;
        assert_eq!((r.objects_deleted, r.errors), (0, 3));
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
    }
    let text = lines.text();
    assert_eq!(
        text.matches("DELETE failed").count(),
        1,
        "three rounds of three failed DELETEs, one line:\n{text}"
    );
    assert!(text.contains("objects=3"), "{text}");

    f.faults.set_unavailable(false);
    tokio::time::advance(crate::failure_log::FailureLog::EVERY).await;
    let r = f.gc.run_once(&none).await;
    assert_eq!(r.objects_deleted, 3);
    let text = lines.text();
    assert_eq!(text.matches("DELETEs succeed again").count(), 1, "{text}");
    assert!(text.contains("failures=3"), "three failed rounds:\n{text}");
}

#[tokio::test]
async fn crash_between_delete_and_tombstone_recovers_from_the_replay() {
    let f = fixture();
    let o = okey(10_000, 0);
    let m = slice(&o, 0, 0, 9, 10_000);
    // The object is already gone (deleted before a crash); the replay brings its record back.
    let restarted = WalGc::new(
        config(),
        Arc::new(f.mem.clone()),
        f.tombstones.clone(),
        f.clock.clone(),
    );
    restarted.on_metadata(&WalMetadataEvent::Upsert(m.clone()));
    let r = restarted.run_once(&HashMap::new()).await;
    assert_eq!((r.objects_deleted, r.tombstones, r.completed), (1, 1, 1));
    assert_eq!(lock(&f.tombstones.published).clone(), vec![m.key()]);
}

#[tokio::test]
async fn orphans_are_found_and_deleted_after_the_grace_period() {
    let f = fixture();
    let published = okey(80_000, 0);
    let orphan = okey(80_000, 1);
    let young = okey(95_000, 2);
    let other_broker = WalObjectKey::new(10, 1_000, 0)
        .map(|k| k.to_string())
        .unwrap_or_default();
    let foreign = "wal/1/not-a-wal-key";
    for k in [&published, &orphan, &young, &other_broker] {
        put(&f.mem, k).await;
    }
    put(&f.mem, foreign).await;
    f.gc.on_published(&[slice(&published, 0, 0, 9, 80_000)]);

    assert_eq!(
        f.gc.sweep_orphans().await,
        GcReport::default(),
        "no sweep before the metadata replay is complete"
    );
    f.gc.set_metadata_caught_up();

    let r = f.gc.sweep_orphans().await;
    assert_eq!(
        r,
        GcReport::default(),
        "the first sighting only makes a suspect"
    );
    assert!(exists(&f.mem, &orphan).await);
    f.faults.fail_next(Op::Delete, 1, FaultKind::Timeout);
    let r = f.gc.sweep_orphans().await;
    assert_eq!((r.orphans_deleted, r.errors), (0, 1));
    assert_eq!(
        f.gc.with_planner(|p| p.orphans().map(str::to_owned).collect::<Vec<_>>()),
        vec![orphan.clone()]
    );
    let r = f.gc.sweep_orphans().await;
    assert_eq!((r.orphans_deleted, r.errors), (1, 0));
    assert!(!exists(&f.mem, &orphan).await);
    for k in [&published, &young, &other_broker] {
        assert!(exists(&f.mem, k).await, "{k} must survive");
    }
    assert!(exists(&f.mem, foreign).await);

    f.clock.advance(10_001);
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 0, "suspect");
    let r = f.gc.sweep_orphans().await;
    assert_eq!(r.orphans_deleted, 1, "the young one after its grace period");
    assert!(!exists(&f.mem, &young).await);
    assert!(exists(&f.mem, &published).await);
}

#[tokio::test]
async fn a_suspect_whose_metadata_arrives_before_the_next_sweep_is_kept() {
    // A restarted broker's metadata replica catches up after the replay first reached its end:
    // the object published before the crash looks untracked for one sweep only.
    let f = fixture();
    let late = okey(80_000, 0);
    put(&f.mem, &late).await;
    f.gc.set_metadata_caught_up();
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 0);
    f.gc.on_metadata(&WalMetadataEvent::Upsert(slice(&late, 0, 0, 9, 80_000)));
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 0);
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 0);
    assert!(exists(&f.mem, &late).await);
}

#[tokio::test]
async fn listing_failure_is_an_error_not_a_deletion() {
    let f = fixture();
    put(&f.mem, &okey(1_000, 0)).await;
    f.gc.set_metadata_caught_up();
    f.faults.fail_next(Op::List, 1, FaultKind::Unavailable);
    let r = f.gc.sweep_orphans().await;
    assert_eq!((r.orphans_deleted, r.errors), (0, 1));
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 0, "suspect");
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 1);
}

#[tokio::test(start_paused = true)]
async fn run_loop_collects_and_sweeps_until_shutdown() {
    let f = fixture();
    let published = okey(90_000, 0);
    let orphan = okey(50_000, 1);
    put(&f.mem, &published).await;
    put(&f.mem, &orphan).await;
    f.gc.on_published(&[slice(&published, 0, 0, 9, 90_000)]);
    f.gc.set_metadata_caught_up();
    let caught_up = progress(&[(0, &[replica(1, 10, true), replica(2, 10, true)])]);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let gc = f.gc.clone();
    let task = tokio::spawn(async move {
        gc.run(
            &caught_up,
            std::time::Duration::from_secs(1),
            1,
            async move {
                let _ = stopped.await;
            },
        )
        .await;
    });
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    assert!(!exists(&f.mem, &published).await, "deleted in round 1");
    assert!(
        !exists(&f.mem, &orphan).await,
        "suspect in round 1, swept in round 2"
    );
    assert_eq!(lock(&f.tombstones.published).len(), 1);
    let _ = stop.send(());
    assert!(task.await.is_ok());
}

/// Progress where nothing is held, naming `gone` as uploaders this GC takes over (rule 6).
struct Gone(BTreeSet<i32>);

impl ReplicaProgressSource for Gone {
    fn progress(&self, _: &WalPartition) -> Option<PartitionProgress> {
        None
    }

    fn gone_uploaders(&self) -> BTreeSet<i32> {
        self.0.clone()
    }
}

fn foreign_key(broker: i32, created_ms: i64, seq: u64) -> String {
    WalObjectKey::new(broker, created_ms, seq)
        .map(|k| k.to_string())
        .unwrap_or_default()
}

fn foreign_slice(broker: i32, object_key: &str, p: i32, upload_ms: i64) -> WalSliceMetadata {
    WalSliceMetadata {
        uploader_broker_id: broker,
        ..slice(object_key, p, 0, 9, upload_ms)
    }
}

/// Issue 10: a broker that never comes back leaves its objects and their metadata behind, and
/// every GC collected only its own. Another broker of the bucket tracks them from the metadata
/// and, once the glue names their uploader gone, deletes and tombstones them; until then they
/// are not its business, whatever replicas or age say.
#[tokio::test]
async fn objects_of_a_broker_gone_for_good_are_collected_by_another_of_its_bucket() {
    let f = fixture();
    let tracked = foreign_key(2, 20_000, 0);
    let alive = foreign_key(3, 20_000, 0);
    let fresh = foreign_key(2, 99_000, 1);
    for k in [&tracked, &alive, &fresh] {
        put(&f.mem, k).await;
    }
    f.gc.on_metadata(&WalMetadataEvent::Upsert(foreign_slice(
        2, &tracked, 0, 20_000,
    )));
    f.gc.on_metadata(&WalMetadataEvent::Upsert(foreign_slice(
        2, &tracked, 1, 20_000,
    )));
    f.gc.on_metadata(&WalMetadataEvent::Upsert(foreign_slice(
        3, &alive, 5, 20_000,
    )));
    f.gc.on_metadata(&WalMetadataEvent::Upsert(foreign_slice(
        2, &fresh, 6, 99_000,
    )));
    assert_eq!(f.gc.with_planner(GcPlanner::tracked), 3);

    // Past local.retention.ms (60 s), but their uploaders are not gone: not ours.
    let r = f.gc.run_once(&Gone(BTreeSet::new())).await;
    assert_eq!(r, GcReport::default());
    let r = f.gc.run_once(&Gone(BTreeSet::from([BROKER]))).await;
    assert_eq!(
        r,
        GcReport::default(),
        "this broker is never 'gone' to itself"
    );

    let r = f.gc.run_once(&Gone(BTreeSet::from([2]))).await;
    assert_eq!((r.objects_deleted, r.tombstones, r.completed), (1, 2, 1));
    assert!(!exists(&f.mem, &tracked).await);
    assert!(exists(&f.mem, &alive).await, "broker 3 is not gone");
    assert!(
        exists(&f.mem, &fresh).await,
        "younger than the orphan grace: a fenced broker may still be writing"
    );
    let mut tombstoned = lock(&f.tombstones.published).clone();
    tombstoned.sort_by_key(|k| k.partition);
    assert_eq!(
        tombstoned.iter().map(|k| k.partition).collect::<Vec<_>>(),
        [0, 1]
    );
}

/// Rule 6 with rule 4: objects of a gone uploader whose metadata already expired (the metadata
/// topic's retention) are found by listing its key prefix, and deleted after two sweeps.
#[tokio::test]
async fn the_orphan_sweep_lists_the_prefixes_of_gone_uploaders() {
    let f = fixture();
    let expired = foreign_key(2, 1_000, 0);
    let alive = foreign_key(3, 1_000, 0);
    for k in [&expired, &alive] {
        put(&f.mem, k).await;
    }
    f.gc.set_metadata_caught_up();
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 0);
    assert_eq!(
        f.gc.sweep_orphans().await.orphans_deleted,
        0,
        "not ours yet"
    );
    f.gc.run_once(&Gone(BTreeSet::from([2]))).await;
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 0, "suspect");
    assert_eq!(f.gc.sweep_orphans().await.orphans_deleted, 1);
    assert!(!exists(&f.mem, &expired).await);
    assert!(exists(&f.mem, &alive).await);
}

/// A round's deletable objects leave in one batch delete (S3 `DeleteObjects`), not one DELETE
/// each; every one of them is gone and tombstoned.
#[tokio::test]
async fn a_round_deletes_its_objects_in_one_batch_request() {
    let clock = ManualClock::new(100_000);
    let mem = MemoryStore::with_clock("az1", clock.clone());
    let metrics = ferry_objstore::ObjStoreMetrics::new();
    let store = ferry_objstore::MeteredStore::new(mem.clone(), metrics.clone());
    let tombstones = Arc::new(Tombstones::default());
    let gc = WalGc::new(config(), Arc::new(store), tombstones.clone(), clock.clone());
    let objects: Vec<String> = (0..5).map(|i| okey(90_000, i)).collect();
    for (i, o) in objects.iter().enumerate() {
        put(&mem, o).await;
        let base = 10 * i as i64;
        gc.on_published(&[slice(o, 0, base, base + 9, 90_000)]);
    }
    let caught_up = progress(&[(0, &[replica(1, 50, true), replica(2, 50, true)])]);
    let r = gc.run_once(&caught_up).await;
    assert_eq!((r.objects_deleted, r.tombstones, r.errors), (5, 5, 0));
    for o in &objects {
        assert!(!exists(&mem, o).await, "{o} deleted");
    }
    assert_eq!(metrics.requests(Op::DeleteMany, "az1", "ok"), 1);
    assert_eq!(metrics.requests(Op::Delete, "az1", "ok"), 0);
}
