//! Where the readers of a followed topic are in each of its partitions, and which way each is
//! read (see the module above): one next offset per partition, shared by the local reader and
//! the network readers, so that nothing is read twice or skipped when a partition moves between
//! them.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

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

    /// Where a local read of `p` starts, given the replica's log start and end offsets: a
    /// follower replica may have been truncated below what was read, and its start may have
    /// moved past it (retention, or a restarted replica that found its leader's log start
    /// beyond its own end and started over there); what lay below the start is gone, as for a
    /// network read that gets OFFSET_OUT_OF_RANGE.
    pub fn local_start(&self, p: i32, log_start: i64, log_end: i64) -> i64 {
        self.next
            .get(&p)
            .copied()
            .unwrap_or(log_start)
            .max(log_start)
            .min(log_end)
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

    /// Every remote partition reached its high watermark once (local ones are read to their
    /// end in each round before this is asked).
    pub fn remote_caught_up(&self) -> bool {
        self.remote.iter().all(|p| self.remote_at_end.contains(p))
    }
}

pub(crate) fn lock(progress: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|p| p.into_inner())
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

    #[test]
    fn a_local_replica_whose_start_moved_past_the_position_is_read_from_its_start() {
        let mut p = Progress::default();
        p.route(1, all_open(0));
        // Read to the end of an empty replica (a broker that restarted with nothing).
        assert_eq!(p.local_start(0, 0, 0), 0);
        p.set_next(0, 0);
        // The replica starts over at its leader's log start (1,100): reading resumes there,
        // not at 0, which is out of range for ever.
        assert_eq!(p.local_start(0, 1_100, 1_100), 1_100);
        assert_eq!(p.local_start(0, 1_100, 1_250), 1_100);
        // Retention moved the start past what was read.
        p.set_next(0, 1_200);
        assert_eq!(p.local_start(0, 1_230, 1_300), 1_230);
    }
}
