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

/// What a [`FollowedRecords`] sink did with a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// Applied all of it: read on from this offset (after the last batch).
    Through(i64),
    /// Applied the records before this offset and is full for now: read again from here, a
    /// little later (the remote WAL's fetcher while a follower catches up on a backlog).
    Full(i64),
}

/// Where the records of a followed topic go.
pub trait FollowedRecords: Send + Sync + 'static {
    /// Applies the batches read from offset `from` of partition `partition` (whole batches, in
    /// order; records before `from` are skipped); says where to read on ([`Fed`]): `Through`
    /// the offset after the last batch (`from` when there was none), or `Full` at the first
    /// record it did not apply.
    fn feed(&self, partition: i32, records: Bytes, from: i64) -> Fed;

    /// Every partition has been read to its end (local replicas) or high watermark (the
    /// others); told again when that holds again after a read the sink held back ([`Fed::Full`]).
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
    // Whether every partition was read to its end in the last round, as last told the sink.
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
        let mut local_at_end = true;
        for (index, p) in &local {
            local_at_end &= read_local(sink.as_ref(), topic, &progress, *index, p);
        }
        // Told again after the sink held a read back (it was not at the end meanwhile).
        let at_end = count > 0 && local_at_end && lock(&progress).remote_caught_up();
        if at_end && !caught_up {
            sink.caught_up();
        }
        caught_up = at_end;
        if watchers.is_empty() {
            tokio::time::sleep(TICK).await;
            continue;
        }
        let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        let _ = tokio::time::timeout(TICK, changed).await;
    }
}

/// Reads one local replica from where reading stopped up to its log end; returns false when
/// the sink held the read back (it is full for now), true otherwise (a failed read is retried
/// at the next round, as before).
fn read_local(
    sink: &dyn FollowedRecords,
    topic: &str,
    progress: &Mutex<Progress>,
    index: i32,
    p: &Partition,
) -> bool {
    let end = p.log.log_end_offset();
    let mut offset = lock(progress).local_start(index, p.log.log_start_offset(), end);
    let mut held_back = false;
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
        match sink.feed(index, data.records, offset) {
            Fed::Through(n) if n > offset => offset = n,
            Fed::Through(_) => break,
            // Read again from there at the next wake-up (new records, or the tick).
            Fed::Full(n) => {
                offset = n.max(offset);
                held_back = true;
                break;
            }
        }
    }
    lock(progress).set_next(index, offset);
    !held_back
}
