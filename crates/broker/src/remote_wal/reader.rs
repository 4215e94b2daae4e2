//! Follows every partition of `__remote_wal_log_metadata` and hands each record to the WAL
//! fetcher and the GC (`RemoteWal::feed`).
//!
//! A partition this broker hosts a replica of is read from that local replica, up to its log end.
//! A partition it hosts no replica of (the topic's replication factor is min(3, live brokers),
//! so in a cluster of more than three brokers each broker lacks some) is fetched over the
//! network as a consumer would (KIP-1176: followers read the WAL metadata topic like
//! consumers), by one task per such partition (`remote_reader.rs`): Fetch with `replica_id` -1
//! and this broker's rack, from the leader in the image or the replica in this rack the leader
//! names (KIP-392), up to the high watermark. In clusters of up to three brokers every partition
//! is local and nothing is fetched.
//!
//! [`Progress`] holds the one "next offset per partition" both ways share and decides which
//! way each partition is read ([`Progress::route`]): a partition moves to the network when this
//! broker loses its replica, and back to the local replica (after a reassignment) only once that
//! replica's log reaches what was already read, so nothing is read twice or skipped. A network
//! read is applied only if the partition is still read over the network from the offset it was
//! sent with. The GC's "metadata caught up" signal (it enables the orphan sweep) is given once
//! every local partition has been read to its end and every remote one to its high watermark.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::Bytes;
use ferry_wal::metadata::{WalMetadataRecord, METADATA_TOPIC};
use futures::future::select_all;
use tokio::task::JoinHandle;

use ferry_cluster::BrokerId;

use super::{remote_reader, RemoteWal};
use crate::inter_broker::PeerClient;
use crate::metadata::MetadataStore;
use crate::replica_manager::{Partition, ReplicaManager};

const MAX_READ: usize = 1 << 20;

/// What the metadata reader needs of the broker: the image, the local replicas (held weakly:
/// the readers end with the broker), the peers to fetch from, and its settings.
#[derive(Clone)]
pub struct ReaderHandles {
    pub node_id: BrokerId,
    /// `broker.rack`, sent with network fetches (KIP-392); empty when unset.
    pub rack: String,
    /// `replica.fetch.wait.max.ms`, the long-poll of network fetches.
    pub wait_max_ms: i32,
    pub metadata: Arc<MetadataStore>,
    pub peers: PeerClient,
    pub replicas: Weak<ReplicaManager>,
}
/// How often the routing is looked at again without a wake-up (image changes come unannounced).
const TICK: Duration = Duration::from_millis(200);

/// This broker's replica of one metadata partition, as routing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalReplica {
    /// Not a replica of the partition (by the image).
    Absent,
    /// A replica by the image, but its log is not open here yet.
    Opening,
    /// An open local replica with this log end offset.
    Open(i64),
}

/// Which partitions are read from where this round.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Route {
    pub local: Vec<i32>,
    pub remote: Vec<i32>,
}

/// The reading position of every metadata partition, and which ones are read over the network.
#[derive(Debug, Default)]
pub struct Progress {
    /// Next offset to read per partition; absent: from the log start.
    next: HashMap<i32, i64>,
    /// Partitions read over the network now.
    remote: BTreeSet<i32>,
    /// Remote partitions read up to the high watermark at least once.
    remote_at_end: BTreeSet<i32>,
}

impl Progress {
    /// Routes each of `count` partitions: local when this broker has an open replica, except
    /// that a partition read over the network stays there until the local log reaches the
    /// offset it was read to (a replica gained by reassignment starts empty); over the network
    /// when this broker is not a replica. A replica still opening waits.
    pub fn route(&mut self, count: i32, mut local: impl FnMut(i32) -> LocalReplica) -> Route {
        let mut route = Route::default();
        for p in 0..count.max(0) {
            let remote_now = self.remote.contains(&p);
            let to_remote = match local(p) {
                LocalReplica::Absent => true,
                LocalReplica::Opening => {
                    if !remote_now {
                        continue;
                    }
                    true
                }
                LocalReplica::Open(end) => {
                    remote_now && self.next.get(&p).is_some_and(|next| end < *next)
                }
            };
            if to_remote {
                route.remote.push(p);
            } else {
                route.local.push(p);
            }
        }
        self.remote = route.remote.iter().copied().collect();
        self.remote_at_end.retain(|p| self.remote.contains(p));
        route
    }

    /// Where a local read of `p` starts, given the replica's log start and end offsets (a
    /// follower replica may have been truncated below what was read).
    pub fn local_start(&self, p: i32, log_start: i64, log_end: i64) -> i64 {
        self.next.get(&p).copied().unwrap_or(log_start).min(log_end)
    }

    pub fn set_next(&mut self, p: i32, next: i64) {
        self.next.insert(p, next);
    }

    /// The offset to fetch `p` from over the network, `None` when it is not read that way now.
    /// A partition never read starts at 0: an out-of-range answer moves it to the log start.
    pub fn remote_offset(&self, p: i32) -> Option<i64> {
        self.remote
            .contains(&p)
            .then(|| self.next.get(&p).copied().unwrap_or(0))
    }

    /// Whether an answer to a fetch of `p` from `from` may still be applied.
    pub fn accepts(&self, p: i32, from: i64) -> bool {
        self.remote_offset(p) == Some(from)
    }

    /// Records a network read of `p` that ends before `next`, from a replica whose high
    /// watermark was `high_watermark`.
    pub fn on_remote_read(&mut self, p: i32, next: i64, high_watermark: i64) {
        self.next.insert(p, next);
        if next >= high_watermark {
            self.remote_at_end.insert(p);
        }
    }

    /// OFFSET_OUT_OF_RANGE from the leader: compaction or retention removed what was next, or
    /// the log was truncated below it; reading starts again at the leader's log start.
    pub fn on_out_of_range(&mut self, p: i32, leader_log_start: i64) {
        self.next.insert(p, leader_log_start.max(0));
        self.remote_at_end.remove(&p);
    }

    /// Every remote partition reached its high watermark once (local ones are read to their end
    /// in each round before this is asked).
    pub fn remote_caught_up(&self) -> bool {
        self.remote.iter().all(|p| self.remote_at_end.contains(p))
    }
}

pub(super) fn lock(progress: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|p| p.into_inner())
}

/// The network readers, one per remote partition; stopped when dropped.
#[derive(Default)]
struct RemoteTasks(HashMap<i32, JoinHandle<()>>);

impl RemoteTasks {
    fn sync(
        &mut self,
        remote: &[i32],
        wal: &Arc<RemoteWal>,
        handles: &ReaderHandles,
        progress: &Arc<Mutex<Progress>>,
    ) {
        self.0.retain(|p, task| {
            let keep = remote.contains(p) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for p in remote {
            self.0.entry(*p).or_insert_with(|| {
                tokio::spawn(remote_reader::run(
                    *p,
                    wal.clone(),
                    handles.clone(),
                    progress.clone(),
                ))
            });
        }
    }
}

impl Drop for RemoteTasks {
    fn drop(&mut self) {
        for task in self.0.values() {
            task.abort();
        }
    }
}

/// Runs until the task is dropped.
pub async fn run(wal: Arc<RemoteWal>, handles: ReaderHandles) {
    let progress = Arc::new(Mutex::new(Progress::default()));
    let mut tasks = RemoteTasks::default();
    let mut caught_up = false;
    loop {
        let Some(replicas) = handles.replicas.upgrade() else {
            return;
        };
        let image = handles.metadata.image();
        let count = image
            .topic(METADATA_TOPIC)
            .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
            .unwrap_or(0);
        let mut open: HashMap<i32, Arc<Partition>> = HashMap::new();
        let route = lock(&progress).route(count, |p| {
            let replica = image
                .topic(METADATA_TOPIC)
                .and_then(|t| t.partitions.get(usize::try_from(p).ok()?))
                .is_some_and(|s| s.replicas.contains(&handles.node_id));
            match replicas.partition_of(METADATA_TOPIC, p) {
                Some(part) => {
                    let end = part.log.log_end_offset();
                    open.insert(p, part);
                    LocalReplica::Open(end)
                }
                None if replica => LocalReplica::Opening,
                None => LocalReplica::Absent,
            }
        });
        drop(image);
        drop(replicas);
        tasks.sync(&route.remote, &wal, &handles, &progress);
        let local: Vec<(i32, Arc<Partition>)> = route
            .local
            .iter()
            .filter_map(|p| open.remove(p).map(|part| (*p, part)))
            .collect();
        let mut watchers: Vec<_> = local.iter().map(|(_, p)| p.subscribe()).collect();
        for (index, p) in &local {
            read_local(&wal, &progress, *index, p);
        }
        if !caught_up && count > 0 && lock(&progress).remote_caught_up() {
            caught_up = true;
            wal.metadata_caught_up();
        }
        if watchers.is_empty() {
            tokio::time::sleep(TICK).await;
            continue;
        }
        let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        let _ = tokio::time::timeout(TICK, changed).await;
    }
}

/// Reads one local replica from where reading stopped up to its log end.
fn read_local(wal: &RemoteWal, progress: &Mutex<Progress>, index: i32, p: &Partition) {
    let end = p.log.log_end_offset();
    let mut offset = lock(progress).local_start(index, p.log.log_start_offset(), end);
    while offset < end {
        let data = match p.log.read(offset, MAX_READ, end, true) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(partition = index, error = %e, "reading remote WAL metadata");
                break;
            }
        };
        if data.records.is_empty() {
            break;
        }
        let n = wal.feed(data.records, offset);
        if n <= offset {
            break;
        }
        offset = n;
    }
    lock(progress).set_next(index, offset);
}

/// Decodes whole batches; returns the records at or after `from` as (key, value) and the next
/// offset to read.
pub fn decode(records: Bytes, from: i64) -> (Vec<crate::keyed_records::KeyValue>, i64) {
    crate::keyed_records::decode(records, from).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "undecodable remote WAL metadata batch skipped");
        (Vec::new(), from)
    })
}

impl RemoteWal {
    /// Feeds a read of the metadata topic to the fetcher and the GC; returns the next offset.
    pub(super) fn feed(&self, records: Bytes, from: i64) -> i64 {
        let (recs, next) = decode(records, from);
        self.fetcher
            .on_raw_metadata(recs.iter().map(|(k, v)| (k.as_ref(), v.as_deref())));
        if let Some(gc) = &self.gc {
            for (k, v) in &recs {
                if let Ok(e) = WalMetadataRecord::decode(k, v.as_deref()) {
                    gc.on_metadata(&e);
                }
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_open(end: i64) -> impl Fn(i32) -> LocalReplica {
        move |_| LocalReplica::Open(end)
    }

    #[test]
    fn a_broker_hosting_every_partition_reads_nothing_over_the_network() {
        let mut p = Progress::default();
        let route = p.route(4, all_open(10));
        assert_eq!(route.local, vec![0, 1, 2, 3]);
        assert!(route.remote.is_empty());
        assert_eq!(p.remote_offset(0), None);
        assert!(p.remote_caught_up());
        // A replica still opening is neither read locally nor fetched.
        let route = p.route(2, |i| {
            if i == 0 {
                LocalReplica::Opening
            } else {
                LocalReplica::Open(0)
            }
        });
        assert_eq!(
            route,
            Route {
                local: vec![1],
                remote: vec![]
            }
        );
    }

    #[test]
    fn partitions_without_a_local_replica_are_fetched_from_offset_zero_until_caught_up() {
        let mut p = Progress::default();
        let hosted = |i: i32| {
            if i % 2 == 0 {
                LocalReplica::Open(5)
            } else {
                LocalReplica::Absent
            }
        };
        let route = p.route(4, hosted);
        assert_eq!(route.local, vec![0, 2]);
        assert_eq!(route.remote, vec![1, 3]);
        assert_eq!(p.remote_offset(1), Some(0));
        assert!(!p.remote_caught_up());

        // Partition 1 read to its high watermark, partition 3 only part of the way.
        assert!(p.accepts(1, 0));
        p.on_remote_read(1, 40, 40);
        p.on_remote_read(3, 7, 20);
        assert!(!p.remote_caught_up());
        assert_eq!(p.remote_offset(3), Some(7));
        // An answer to a fetch from an offset that is no longer the next one is stale.
        assert!(!p.accepts(3, 0));
        p.on_remote_read(3, 20, 20);
        assert!(p.remote_caught_up());
        // Routing again keeps the positions.
        p.route(4, hosted);
        assert_eq!(p.remote_offset(1), Some(40));
        assert!(p.remote_caught_up());
    }

    #[test]
    fn out_of_range_restarts_at_the_leaders_log_start() {
        let mut p = Progress::default();
        p.route(1, |_| LocalReplica::Absent);
        p.on_remote_read(0, 30, 30);
        assert!(p.remote_caught_up());
        // Compaction moved the log start past 0 (first read) or past our position (truncation).
        p.on_out_of_range(0, 120);
        assert_eq!(p.remote_offset(0), Some(120));
        assert!(
            !p.remote_caught_up(),
            "the restarted read is not at the end yet"
        );
        p.on_out_of_range(0, -1);
        assert_eq!(p.remote_offset(0), Some(0));
    }

    #[test]
    fn a_partition_moves_between_local_and_remote_without_reading_twice() {
        let mut p = Progress::default();
        // Local at first, read to 50.
        p.route(1, all_open(50));
        assert_eq!(p.local_start(0, 0, 50), 0);
        p.set_next(0, 50);
        // The replica is reassigned away: fetched from 50.
        let route = p.route(1, |_| LocalReplica::Absent);
        assert_eq!(route.remote, vec![0]);
        assert_eq!(p.remote_offset(0), Some(50));
        p.on_remote_read(0, 80, 80);
        // Reassigned back: the new replica opens, then catches up from empty. It stays remote
        // until its log reaches 80, then local reading resumes at 80.
        assert_eq!(p.route(1, |_| LocalReplica::Opening).remote, vec![0]);
        assert_eq!(p.route(1, all_open(0)).remote, vec![0]);
        assert_eq!(p.route(1, all_open(79)).remote, vec![0]);
        let route = p.route(1, all_open(80));
        assert_eq!(route.local, vec![0]);
        assert_eq!(p.remote_offset(0), None);
        assert!(
            !p.accepts(0, 80),
            "a late answer of the remote task is dropped"
        );
        assert_eq!(p.local_start(0, 0, 95), 80);
        // A local replica truncated below the position is read from its end.
        assert_eq!(p.local_start(0, 0, 60), 60);
    }
}
