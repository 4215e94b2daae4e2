//! The GC glue: replica progress as the leader tracks it (for every partition led here, every
//! assigned replica), what the long-term tier holds of tiered topics, each topic's effective
//! `local.retention.ms`, and the GC task deleting this broker's objects once nobody needs them:
//! every assigned replica holds their data, or the tier does, or they are older than that
//! retention capped by `remote.wal.retention.max.ms` (RFC 0003, issue 14;
//! `remote.wal.retention.ms` for topics this broker does not know).
//!
//! It also names the brokers gone for good whose objects this broker collects (the GC's rule 6,
//! [`gone_uploaders`]): otherwise the objects and metadata of a broker that never comes back
//! would stay forever, since each broker collects only its own.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_cluster::{BrokerId, Image};
use ferry_common::SharedClock;
use ferry_wal::gc::{PartitionProgress, ReplicaProgress, ReplicaProgressSource, WalGc};
use ferry_wal::uploader::WalPartition;

use super::Shared;

/// The rack name a bucket is chosen by (`ferry_config::remote_wal_config`: no rack is `default`).
fn rack_key(rack: Option<&str>) -> &str {
    match rack {
        Some(r) if !r.is_empty() => r,
        _ => "default",
    }
}

/// The other brokers of `rack` (they upload to its bucket) whose objects `me` collects: those
/// fenced for longer than `after_ms`, as this broker watched (`absent_since`: when each was
/// first seen fenced, kept across calls; forgotten once it is back), when `me` is the lowest
/// live broker id of the rack, so that one broker takes over. `after_ms` is the metadata topic's
/// retention: by then the gone broker's metadata has expired too, and if it ever returns, its
/// own orphan sweep would delete the same objects. A broker absent from the image is never
/// named (ferry does not unregister brokers; an id the image never had uploaded nothing here).
pub fn gone_uploaders(
    image: &Image,
    me: BrokerId,
    rack: &str,
    absent_since: &mut HashMap<BrokerId, i64>,
    now_ms: i64,
    after_ms: i64,
) -> BTreeSet<BrokerId> {
    let mut gone = BTreeSet::new();
    let mut lowest_live = None;
    for b in image.brokers.values() {
        if rack_key(b.rack.as_deref()) != rack {
            continue;
        }
        if !b.fenced {
            absent_since.remove(&b.id);
            lowest_live = Some(lowest_live.map_or(b.id, |l: BrokerId| l.min(b.id)));
            continue;
        }
        let since = *absent_since.entry(b.id).or_insert(now_ms);
        if b.id != me && now_ms.saturating_sub(since) > after_ms {
            gone.insert(b.id);
        }
    }
    if lowest_live != Some(me) {
        gone.clear();
    }
    gone
}

/// Replica progress as this broker knows it: the leader's view of its followers' log end
/// offsets; on a follower (the uploader lost the leadership after a restart or failover), the
/// high watermark it learnt from the leader, a lower bound of every in-sync replica's log end.
/// Without the follower case the objects an uploader wrote before losing a leadership would
/// wait for `local.retention.ms` (days by default).
pub struct LeaderProgress {
    pub(super) shared: Arc<Shared>,
    clock: SharedClock,
    /// Per broker of this rack: when it was first seen fenced ([`gone_uploaders`]).
    absent_since: Mutex<HashMap<BrokerId, i64>>,
}

impl ReplicaProgressSource for LeaderProgress {
    fn progress(&self, wp: &WalPartition) -> Option<PartitionProgress> {
        let name = self.shared.topic_name(wp.topic_id)?;
        let host = self.shared.host.as_ref()?;
        let p = host.replicas()?.partition_of(&name, wp.partition)?;
        if p.topic_id != wp.topic_id {
            return None;
        }
        if !p.is_leader() {
            return Some(PartitionProgress {
                replicas: vec![ReplicaProgress {
                    broker_id: host.node_id,
                    log_end_offset: p.high_watermark(),
                    in_sync: true,
                }],
            });
        }
        Some(assigned_progress(&p.replicas(), &p.replica_progress()))
    }

    fn local_retention_ms(&self, wp: &WalPartition) -> Option<i64> {
        let name = self.shared.topic_name(wp.topic_id)?;
        let host = self.shared.host.as_ref()?;
        let image = host.metadata.image();
        let topic = image.topic(&name)?;
        Some(super::local_retention_ms(&host.config, &topic.configs).unwrap_or(-1))
    }

    fn tiered_end(&self, wp: &WalPartition) -> Option<i64> {
        let name = self.shared.topic_name(wp.topic_id)?;
        let host = self.shared.host.as_ref()?;
        let p = host.replicas()?.partition_of(&name, wp.partition)?;
        if p.topic_id != wp.topic_id {
            return None;
        }
        self.shared.tiered_end(&p)
    }

    fn gone_uploaders(&self) -> BTreeSet<i32> {
        let Some(host) = self.shared.host.as_ref() else {
            return BTreeSet::new();
        };
        let c = &self.shared.config;
        let mut absent = self.absent_since.lock().unwrap_or_else(|p| p.into_inner());
        let gone = gone_uploaders(
            &host.metadata.image(),
            c.node_id,
            &c.rack,
            &mut absent,
            self.clock.now_ms(),
            c.metadata_retention_ms,
        );
        if !gone.is_empty() {
            tracing::info!(brokers = ?gone, rack = %c.rack, "remote WAL GC: collecting the objects of brokers gone for good");
        }
        gone
    }
}

/// Rule 1's view of a led partition: every assigned replica (`replicas`, the image's, adding
/// ones of a reassignment included) with its log end offset as the leader tracks it
/// (`tracked`: id, log end offset, in sync), -1 for one it has not heard from since it took
/// over (offline); replicas no longer assigned are left out.
pub fn assigned_progress(
    replicas: &[BrokerId],
    tracked: &[(BrokerId, i64, bool)],
) -> PartitionProgress {
    PartitionProgress {
        replicas: replicas
            .iter()
            .map(|&broker_id| {
                let (log_end_offset, in_sync) = tracked
                    .iter()
                    .find(|t| t.0 == broker_id)
                    .map_or((-1, false), |t| (t.1, t.2));
                ReplicaProgress {
                    broker_id,
                    log_end_offset,
                    in_sync,
                }
            })
            .collect(),
    }
}

/// Runs the GC rounds (and an orphan sweep every 30 rounds) until the task is dropped.
pub async fn run(gc: WalGc, shared: Arc<Shared>, clock: SharedClock) {
    let every = Duration::from_millis(shared.config.gc_interval_ms);
    let progress = LeaderProgress {
        shared,
        clock,
        absent_since: Mutex::new(HashMap::new()),
    };
    gc.run(&progress, every, 30, std::future::pending()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_cluster::MetadataRecord;

    /// Brokers 1..=4: 1, 2 and 4 in `az1`, 3 in `az2`.
    fn image() -> Image {
        let mut img = Image::default();
        for (id, rack) in [(1, "az1"), (2, "az1"), (3, "az2"), (4, "az1")] {
            img.apply(&MetadataRecord::RegisterBroker {
                id,
                rack: Some(rack.into()),
                host: "h".into(),
                port: 1,
                endpoints: Vec::new(),
            })
            .unwrap();
            img.apply(&MetadataRecord::UnfenceBroker { id }).unwrap();
        }
        img
    }

    fn fence(img: &mut Image, id: BrokerId) {
        img.apply(&MetadataRecord::FenceBroker { id }).unwrap();
    }

    /// Issue 14: the objects stay for every assigned replica, online or not, and for one a
    /// reassignment is adding; a replica no longer assigned holds nothing back.
    #[test]
    fn progress_lists_every_assigned_replica() {
        let tracked = [(1, 50, true), (2, 40, true), (4, 0, false)];
        let p = assigned_progress(&[1, 2, 3], &tracked);
        let ends: Vec<_> = p
            .replicas
            .iter()
            .map(|r| (r.broker_id, r.log_end_offset))
            .collect();
        assert_eq!(ends, vec![(1, 50), (2, 40), (3, -1)]);
        assert!(!p.all_hold(0), "replica 3 has not been heard from");
        let p = assigned_progress(&[1, 2], &tracked);
        assert!(
            p.all_hold(39) && !p.all_hold(40),
            "replica 4 left the assignment"
        );
    }

    /// Issue 10: someone must collect what a broker that never comes back left in its bucket.
    /// Exactly one live broker of its rack does, once it has been gone longer than the
    /// metadata topic's retention; a broker that comes back in time is left alone.
    #[test]
    fn the_lowest_live_broker_of_a_rack_takes_over_a_broker_gone_longer_than_retention() {
        let mut img = image();
        let seen_by = |me| (me, HashMap::new());
        let (mut one, mut two) = (seen_by(1), seen_by(2));
        let ask = |who: &mut (BrokerId, HashMap<BrokerId, i64>), img: &Image, now| {
            gone_uploaders(img, who.0, "az1", &mut who.1, now, 1_000)
        };
        assert!(ask(&mut one, &img, 0).is_empty());
        fence(&mut img, 4);
        assert!(ask(&mut one, &img, 10).is_empty(), "fenced just now");
        assert!(ask(&mut two, &img, 10).is_empty());
        assert!(
            ask(&mut one, &img, 1_010).is_empty(),
            "not longer than retention"
        );
        assert_eq!(ask(&mut one, &img, 1_011), BTreeSet::from([4]));
        assert!(ask(&mut two, &img, 1_011).is_empty(), "1 takes over, not 2");

        // 1 stops too: 2 becomes the lowest live broker, and its own watch of 4 counts.
        fence(&mut img, 1);
        assert_eq!(ask(&mut two, &img, 1_011), BTreeSet::from([4]));
        assert!(ask(&mut two, &img, 2_011).contains(&4));
        assert_eq!(ask(&mut two, &img, 2_012), BTreeSet::from([1, 4]));

        // 4 comes back: not gone any more, and its absence is forgotten.
        img.apply(&MetadataRecord::UnfenceBroker { id: 4 }).unwrap();
        assert_eq!(ask(&mut two, &img, 2_013), BTreeSet::from([1]));
        fence(&mut img, 4);
        assert_eq!(ask(&mut two, &img, 2_014), BTreeSet::from([1]));

        // A broker of another rack never uploads to this bucket.
        fence(&mut img, 3);
        assert!(!ask(&mut two, &img, 99_999).contains(&3));
    }
}
