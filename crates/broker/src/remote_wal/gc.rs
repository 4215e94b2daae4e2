//! The GC glue: replica progress as the leader tracks it (for every partition led here), each
//! topic's effective `local.retention.ms`, and the GC task deleting this broker's objects once
//! every in-sync replica holds their data or they are older than that retention (RFC 0003;
//! `remote.wal.retention.ms` for topics this broker does not know).

use std::sync::{Arc, Weak};
use std::time::Duration;

use ferry_wal::gc::{PartitionProgress, ReplicaProgress, ReplicaProgressSource, WalGc};
use ferry_wal::uploader::WalPartition;

use super::Shared;

/// Replica progress as this broker knows it: the leader's view of its followers' log end
/// offsets; on a follower (the uploader lost the leadership after a restart or failover), the
/// high watermark it learnt from the leader, a lower bound of every in-sync replica's log end.
/// Without the follower case the objects an uploader wrote before losing a leadership would
/// wait for `local.retention.ms` (days by default).
pub struct LeaderProgress {
    pub(super) shared: Arc<Shared>,
}

impl ReplicaProgressSource for LeaderProgress {
    fn progress(&self, wp: &WalPartition) -> Option<PartitionProgress> {
        let name = self.shared.topic_name(wp.topic_id)?;
        let broker = self.shared.broker.get().and_then(Weak::upgrade)?;
        let p = broker.replicas.partition_of(&name, wp.partition)?;
        if p.topic_id != wp.topic_id {
            return None;
        }
        if !p.is_leader() {
            return Some(PartitionProgress {
                replicas: vec![ReplicaProgress {
                    broker_id: broker.node_id,
                    log_end_offset: p.high_watermark(),
                    in_sync: true,
                }],
            });
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

    fn local_retention_ms(&self, wp: &WalPartition) -> Option<i64> {
        let name = self.shared.topic_name(wp.topic_id)?;
        let broker = self.shared.broker.get().and_then(Weak::upgrade)?;
        let image = broker.metadata.image();
        let topic = image.topic(&name)?;
        let value = |key: &str| {
            crate::topic_config::effective(&broker.config, &topic.configs, key)
                .and_then(|(v, _, _)| v.trim().parse::<i64>().ok())
        };
        // KIP-405: -2 means "as long as retention.ms".
        match value("local.retention.ms")? {
            -2 => value("retention.ms"),
            ms => Some(ms),
        }
    }
}

/// Runs the GC rounds (and an orphan sweep every 30 rounds) until the task is dropped.
pub async fn run(gc: WalGc, shared: Arc<Shared>) {
    let every = Duration::from_millis(shared.config.gc_interval_ms);
    let progress = LeaderProgress { shared };
    gc.run(&progress, every, 30, std::future::pending()).await;
}
