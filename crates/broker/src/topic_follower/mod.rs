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
//!
//! A sink may ask for part of a partition to be read again ([`FollowedRecords::reread_from`]):
//! the remote WAL's fetcher, for the records of a partition whose queue was full when they came.
//! Both ways read that part again before reading on; the position stays where it was.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use ferry_metrics::TrafficKind;
use futures::future::select_all;
use tokio::task::JoinHandle;

use crate::host::HostHandles;
use crate::replica_manager::Partition;
use ferry_log::PartitionLog;
use progress::{lock, LocalReplica, Progress};

pub mod progress;
pub mod remote;

/// Where the records of a followed topic go.
pub trait FollowedRecords: Send + Sync + 'static {
    /// Applies the batches read from offset `from` of partition `partition` (whole batches, in
    /// order; records before `from` are skipped, and when `from` lies below the log start the
    /// records between are gone); returns the offset after the last batch (`from` when there
    /// was none).
    fn feed(&self, partition: i32, records: Bytes, from: i64) -> i64;

    /// An offset below where reading got from which the sink wants `partition` read again:
    /// records it could not take when they came (the remote WAL's fetcher while a follower
    /// catches up on a backlog). `None`: nothing to read again now.
    fn reread_from(&self, _partition: i32) -> Option<i64> {
        None
    }

    /// The records of `partition` below `offset` cannot be read again: its log start moved
    /// past them.
    fn gone_below(&self, _partition: i32, _offset: i64) {}

    /// Every partition has been read to its end (local replicas) or high watermark (the
    /// others).
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
    // Told once every partition was read to its end (local ones are, after each round).
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
            read_local(sink.as_ref(), topic, &progress, *index, &p.log);
        }
        if !caught_up && count > 0 && lock(&progress).remote_caught_up() {
            sink.caught_up();
            caught_up = true;
        }
        if watchers.is_empty() {
            tokio::time::sleep(TICK).await;
            continue;
        }
        let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        let _ = tokio::time::timeout(TICK, changed).await;
    }
}

/// Reads one local replica from where reading stopped up to its log end, after reading again
/// what the sink asks for below that (a failed read is retried at the next round).
fn read_local(
    sink: &dyn FollowedRecords,
    topic: &str,
    progress: &Mutex<Progress>,
    index: i32,
    log: &PartitionLog,
) {
    let end = log.log_end_offset();
    let mut offset = lock(progress).local_start(index, log.log_start_offset(), end);
    reread_local(sink, topic, index, log, offset);
    while offset < end {
        let data = match log.read(offset, MAX_READ, end, true) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(topic, partition = index, error = %e, "reading a followed topic");
                break;
            }
        };
        if data.records.is_empty() {
            break;
        }
        let next = sink.feed(index, data.records, offset);
        if next <= offset {
            break;
        }
        offset = next;
    }
    lock(progress).set_next(index, offset);
}

/// Reads a local replica again below `read_to`, where the sink asks (`reread_from`), until it
/// asks no more: each read moves what it asks for up, or leaves the partitions that asked
/// full again.
fn reread_local(
    sink: &dyn FollowedRecords,
    topic: &str,
    index: i32,
    log: &PartitionLog,
    read_to: i64,
) {
    while let Some(from) = sink.reread_from(index).filter(|from| *from < read_to) {
        // What lies below the log start is gone: the read says so by starting at `from`.
        let at = from.max(log.log_start_offset());
        if at >= read_to {
            sink.gone_below(index, at);
            return;
        }
        let data = match log.read(at, MAX_READ, read_to, true) {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(topic, partition = index, error = %e, "reading a followed topic again");
                return;
            }
        };
        if data.records.is_empty() || sink.feed(index, data.records, from) <= from {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_common::TopicPartition;

    /// A sink that takes everything, notes each read (its `from` and the offsets it held),
    /// and asks once for a read again from `again`.
    #[derive(Default)]
    struct NotingSink {
        reads: Mutex<Vec<(i64, Vec<i64>)>>,
        again: Mutex<Option<i64>>,
        gone_below: Mutex<Option<i64>>,
    }

    impl FollowedRecords for NotingSink {
        fn feed(&self, _: i32, records: Bytes, from: i64) -> i64 {
            let mut offsets = Vec::new();
            let next = ferry_log::keyed_records::for_each_record(records, from, |r| {
                offsets.push(r.offset)
            })
            .expect("records");
            let mut again = self.again.lock().unwrap();
            if again.is_some_and(|a| from <= a) {
                *again = None;
            }
            self.reads.lock().unwrap().push((from, offsets));
            next
        }
        fn reread_from(&self, _: i32) -> Option<i64> {
            *self.again.lock().unwrap()
        }
        fn gone_below(&self, _: i32, offset: i64) {
            *self.gone_below.lock().unwrap() = Some(offset);
            *self.again.lock().unwrap() = None;
        }
        fn caught_up(&self) {}
    }

    fn append(log: &PartitionLog, count: usize) {
        for _ in 0..count {
            let batch = ferry_log::keyed_records::encode(
                [(Bytes::from_static(b"k"), Some(Bytes::from_static(b"v")))],
                0,
                kafka_protocol::records::Compression::None,
            )
            .expect("batch");
            log.append_as_leader(&batch, 0).expect("append");
        }
    }

    /// What the sink asks to have read again is read before the new records, from where it
    /// asks, up to where reading had got; below the log start the read says so by its `from`,
    /// and when nothing is left below where reading got the sink is told it is gone.
    #[test]
    fn a_local_replica_is_read_again_where_the_sink_asks() {
        let dir = tempfile::tempdir().expect("dir");
        let log = PartitionLog::open(
            dir.path().to_path_buf(),
            TopicPartition::new("__remote_wal_log_metadata", 0),
            ferry_log::LogConfig::default(),
            true,
            ferry_common::system_clock(),
        )
        .expect("log");
        let progress = Mutex::new(Progress::default());
        lock(&progress).route(1, |_| LocalReplica::Open(0));
        let sink = NotingSink::default();
        let topic = "__remote_wal_log_metadata";
        append(&log, 6);
        read_local(&sink, topic, &progress, 0, &log);
        *sink.again.lock().unwrap() = Some(2);
        append(&log, 2);
        read_local(&sink, topic, &progress, 0, &log);
        assert_eq!(
            *sink.reads.lock().unwrap(),
            vec![
                (0, vec![0, 1, 2, 3, 4, 5]),
                (2, vec![2, 3, 4, 5]),
                (6, vec![6, 7]),
            ]
        );

        // The log start moved past what the sink asks for.
        sink.reads.lock().unwrap().clear();
        log.delete_records_before(5).expect("delete records");
        *sink.again.lock().unwrap() = Some(1);
        read_local(&sink, topic, &progress, 0, &log);
        assert_eq!(*sink.reads.lock().unwrap(), vec![(1, vec![5, 6, 7])]);
        assert_eq!(*sink.gone_below.lock().unwrap(), None);
        log.delete_records_before(8).expect("delete records");
        *sink.again.lock().unwrap() = Some(6);
        read_local(&sink, topic, &progress, 0, &log);
        assert_eq!(*sink.gone_below.lock().unwrap(), Some(8));
    }
}
