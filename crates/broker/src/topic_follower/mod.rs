//! Follows every partition of an internal topic whose records every broker needs, and hands the
//! batches to a [`FollowedRecords`] sink: `__remote_wal_log_metadata` to the remote WAL's
//! fetcher and GC (`RemoteWal::feed`).
//!
//! A partition this broker hosts a replica of is read from that local replica, up to its log end.
//! A partition it hosts no replica of (the topic's replication factor is min(3, live brokers),
//! so in a cluster of more than three brokers each broker lacks some) is fetched over the
//! network as a consumer would (KIP-1176: followers read the WAL metadata topic like
//! consumers), by one task per such partition (`remote.rs`): Fetch with `replica_id` -1
//! and this broker's rack, from the leader in the image or the replica in this rack the leader
//! names (KIP-392), up to the high watermark. In clusters of up to three brokers every partition
//! is local and nothing is fetched.
//!
//! [`Progress`] (`progress.rs`) holds the one "next offset per partition" both ways share and decides which
//! way each partition is read ([`Progress::route`]): a partition moves to the network when this
//! broker loses its replica, and back to the local replica (after a reassignment) only once that
//! replica's log reaches what was already read, so nothing is read twice or skipped. A network
//! read is applied only if the partition is still read over the network from the offset it was
//! sent with. [`FollowedRecords::caught_up`] is called once every local partition has been read
//! to its end and every remote one to its high watermark (the WAL's GC enables its orphan sweep
//! then).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ferry_metrics::TrafficKind;
use futures::future::select_all;
use tokio::task::JoinHandle;

use crate::host::HostHandles;
use crate::replica_manager::Partition;
use progress::{lock, LocalReplica, Progress};

pub mod progress;
pub mod remote;

/// Where the records of a followed topic go.
pub trait FollowedRecords: Send + Sync + 'static {
    /// Applies the batches read from offset `from` of one partition (whole batches, in order;
    /// records before `from` are skipped); returns the offset after the last record applied,
    /// `from` when none was.
    fn feed(&self, records: Bytes, from: i64) -> i64;

    /// Every partition has been read to its end (local replicas) or high watermark (the
    /// others) once.
    fn caught_up(&self);
}

/// Which topic is followed, and how its network reads are labelled.
#[derive(Debug, Clone, Copy)]
pub struct Followed {
    pub topic: &'static str,
    /// The purpose in the reader's inter-broker client id (`ferry_metrics::inter_broker_client_id`).
    pub purpose: &'static str,
    /// The kind its network reads are counted as.
    pub kind: TrafficKind,
}

const MAX_READ: usize = 1 << 20;
/// How often the routing is looked at again without a wake-up (image changes come unannounced).
const TICK: Duration = Duration::from_millis(200);

/// The network readers, one per remote partition; stopped when dropped.
#[derive(Default)]
struct RemoteTasks(HashMap<i32, JoinHandle<()>>);

impl RemoteTasks {
    fn sync(
        &mut self,
        remote: &[i32],
        sink: &Arc<dyn FollowedRecords>,
        followed: Followed,
        handles: &HostHandles,
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
                tokio::spawn(remote::run(
                    *p,
                    sink.clone(),
                    followed,
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
pub async fn run(sink: Arc<dyn FollowedRecords>, followed: Followed, handles: HostHandles) {
    let topic = followed.topic;
    let progress = Arc::new(Mutex::new(Progress::default()));
    let mut tasks = RemoteTasks::default();
    let mut caught_up = false;
    loop {
        let Some(replicas) = handles.replicas() else {
            return;
        };
        let image = handles.metadata.image();
        let count = image
            .topic(topic)
            .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
            .unwrap_or(0);
        let mut open: HashMap<i32, Arc<Partition>> = HashMap::new();
        let route = lock(&progress).route(count, |p| {
            let replica = image
                .topic(topic)
                .and_then(|t| t.partitions.get(usize::try_from(p).ok()?))
                .is_some_and(|s| s.replicas.contains(&handles.node_id));
            match replicas.partition_of(topic, p) {
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
        tasks.sync(&route.remote, &sink, followed, &handles, &progress);
        let local: Vec<(i32, Arc<Partition>)> = route
            .local
            .iter()
            .filter_map(|p| open.remove(p).map(|part| (*p, part)))
            .collect();
        let mut watchers: Vec<_> = local.iter().map(|(_, p)| p.subscribe()).collect();
        for (index, p) in &local {
            read_local(sink.as_ref(), topic, &progress, *index, p);
        }
        if !caught_up && count > 0 && lock(&progress).remote_caught_up() {
            caught_up = true;
            sink.caught_up();
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
fn read_local(
    sink: &dyn FollowedRecords,
    topic: &str,
    progress: &Mutex<Progress>,
    index: i32,
    p: &Partition,
) {
    let end = p.log.log_end_offset();
    let mut offset = lock(progress).local_start(index, p.log.log_start_offset(), end);
    while offset < end {
        let data = match p.log.read(offset, MAX_READ, end, true) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(topic, partition = index, error = %e, "reading a followed topic");
                break;
            }
        };
        if data.records.is_empty() {
            break;
        }
        let n = sink.feed(data.records, offset);
        if n <= offset {
            break;
        }
        offset = n;
    }
    lock(progress).set_next(index, offset);
}
