//! The GC glue: replica progress as the leader tracks it (for every partition led here), and the
//! GC task deleting this broker's objects once every in-sync replica holds their data or they
//! are older than `remote.wal.retention.ms` (RFC 0003).

use std::sync::{Arc, Weak};
use std::time::Duration;

use ferry_wal::gc::{PartitionProgress, ReplicaProgress, ReplicaProgressSource, WalGc};
use ferry_wal::uploader::WalPartition;

use super::Shared;

/// The leader's view of its followers' log end offsets.
pub struct LeaderProgress {
    pub(super) shared: Arc<Shared>,
}

impl ReplicaProgressSource for LeaderProgress {
    fn progress(&self, wp: &WalPartition) -> Option<PartitionProgress> {
        let name = self.shared.topic_name(wp.topic_id)?;
        let broker = self.shared.broker.get().and_then(Weak::upgrade)?;
        let p = broker.replicas.partition_of(&name, wp.partition)?;
        if p.topic_id != wp.topic_id || !p.is_leader() {
            return None;
        }
        Some(PartitionProgress {
            replicas: p
                .replica_progress()
                .into_iter()
                .map(|(broker_id, log_end_offset, in_sync)| ReplicaProgress {
                    broker_id,
                    log_end_offset,
                    in_sync,
                })
                .collect(),
        })
    }
}

/// Runs the GC rounds (and an orphan sweep every 30 rounds) until the task is dropped.
pub async fn run(gc: WalGc, shared: Arc<Shared>) {
    let every = Duration::from_millis(shared.config.gc_interval_ms);
    let progress = LeaderProgress { shared };
    gc.run(&progress, every, 30, std::future::pending()).await;
}
