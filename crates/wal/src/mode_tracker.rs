//! A follower's choice, per partition, between the WAL path and the classic fetch, as pure state
//! (time is passed in). A partition goes classic for a range the leader dropped from the WAL
//! path (until its log end passes the range) or when it has not moved for
//! `remote.wal.fallback.ms` while the leader's high watermark is ahead (until it reaches what the
//! leader had); a new leader epoch puts it back on the WAL path, since the new leader republishes
//! into its own bucket. The broker's glue (`crates/broker/src/remote_wal/follower.rs`) applies
//! the modes to its partitions.

use std::collections::HashMap;

use ferry_common::TopicPartition;

/// Where one partition gets its data from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Wal,
    /// Classic fetch until the log end reaches `until`.
    Classic {
        until: i64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Track {
    mode: Mode,
    last_leo: i64,
    last_progress_ms: i64,
    /// The leader epoch the mode was decided under.
    leader_epoch: i32,
}

/// The pure mode switcher (no I/O; time is passed in).
#[derive(Debug, Default)]
pub struct ModeTracker {
    fallback_ms: i64,
    parts: HashMap<TopicPartition, Track>,
}

impl ModeTracker {
    pub fn new(fallback_ms: i64) -> Self {
        Self {
            fallback_ms,
            parts: HashMap::new(),
        }
    }

    pub fn mode(&self, tp: &TopicPartition) -> Mode {
        self.parts.get(tp).map_or(Mode::Wal, |t| t.mode)
    }

    /// Starts (or restarts) following `tp` on the WAL path.
    pub fn follow(&mut self, tp: &TopicPartition, leo: i64, now_ms: i64) {
        self.follow_at(tp, -1, leo, now_ms);
    }

    fn follow_at(&mut self, tp: &TopicPartition, leader_epoch: i32, leo: i64, now_ms: i64) {
        self.parts.insert(
            tp.clone(),
            Track {
                mode: Mode::Wal,
                last_leo: leo,
                last_progress_ms: now_ms,
                leader_epoch,
            },
        );
    }

    /// Follows `tp` under `leader_epoch`: a partition seen for the first time, or under a new
    /// leader epoch, starts over on the WAL path. A classic range was a verdict on the former
    /// leader's WAL (its bucket may be gone); the new leader republishes what followers may
    /// need into its own bucket. Returns whether it (re)started.
    pub fn follow_epoch(
        &mut self,
        tp: &TopicPartition,
        leader_epoch: i32,
        leo: i64,
        now_ms: i64,
    ) -> bool {
        if self
            .parts
            .get(tp)
            .is_some_and(|t| t.leader_epoch == leader_epoch)
        {
            return false;
        }
        self.follow_at(tp, leader_epoch, leo, now_ms);
        true
    }

    pub fn forget(&mut self, tp: &TopicPartition) {
        self.parts.remove(tp);
    }

    pub fn followed(&self) -> Vec<TopicPartition> {
        self.parts.keys().cloned().collect()
    }

    /// The WAL fetcher cannot serve `from..until`: take it by the classic fetch.
    pub fn on_classic_range(&mut self, tp: &TopicPartition, leo: i64, until: i64) -> Mode {
        let Some(t) = self.parts.get_mut(tp) else {
            return Mode::Wal;
        };
        if until > leo {
            let until = match t.mode {
                Mode::Classic { until: u } => u.max(until),
                Mode::Wal => until,
            };
            t.mode = Mode::Classic { until };
        }
        t.mode
    }

    /// Periodic check with the partition's log end and the leader's high watermark.
    pub fn tick(&mut self, tp: &TopicPartition, leo: i64, leader_hw: i64, now_ms: i64) -> Mode {
        let Some(t) = self.parts.get_mut(tp) else {
            return Mode::Wal;
        };
        if leo != t.last_leo {
            t.last_leo = leo;
            t.last_progress_ms = now_ms;
        }
        match t.mode {
            Mode::Classic { until } if leo >= until => {
                t.mode = Mode::Wal;
                t.last_progress_ms = now_ms;
            }
            Mode::Wal if leader_hw > leo && now_ms - t.last_progress_ms >= self.fallback_ms => {
                t.mode = Mode::Classic { until: leader_hw };
            }
            _ => {}
        }
        t.mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    #[test]
    fn a_fallback_range_goes_classic_until_its_end_then_back_to_wal() {
        let mut m = ModeTracker::new(500);
        m.follow(&tp(), 100, 0);
        assert_eq!(m.mode(&tp()), Mode::Wal);
        // A range already below the log end changes nothing.
        assert_eq!(m.on_classic_range(&tp(), 100, 90), Mode::Wal);
        assert_eq!(
            m.on_classic_range(&tp(), 100, 150),
            Mode::Classic { until: 150 }
        );
        // Ranges widen, never shrink.
        assert_eq!(
            m.on_classic_range(&tp(), 100, 120),
            Mode::Classic { until: 150 }
        );
        assert_eq!(m.tick(&tp(), 140, 140, 10), Mode::Classic { until: 150 });
        assert_eq!(m.tick(&tp(), 150, 150, 20), Mode::Wal);
    }

    #[test]
    fn a_stall_while_the_leader_is_ahead_goes_classic_and_recovers() {
        let mut m = ModeTracker::new(500);
        m.follow(&tp(), 100, 0);
        // Leader not ahead: no stall however long.
        assert_eq!(m.tick(&tp(), 100, 100, 10_000), Mode::Wal);
        // Ahead, but not for long enough yet (progress resets the timer).
        assert_eq!(m.tick(&tp(), 101, 200, 10_100), Mode::Wal);
        assert_eq!(m.tick(&tp(), 101, 200, 10_500), Mode::Wal);
        assert_eq!(
            m.tick(&tp(), 101, 200, 10_600),
            Mode::Classic { until: 200 }
        );
        assert_eq!(
            m.tick(&tp(), 180, 210, 10_700),
            Mode::Classic { until: 200 }
        );
        assert_eq!(m.tick(&tp(), 205, 210, 10_800), Mode::Wal);
        // Back on the WAL path with a fresh timer.
        assert_eq!(m.tick(&tp(), 205, 210, 11_000), Mode::Wal);
    }

    #[test]
    fn a_new_leader_epoch_puts_a_classic_partition_back_on_the_wal_path() {
        let mut m = ModeTracker::new(500);
        assert!(m.follow_epoch(&tp(), 4, 100, 0));
        assert!(!m.follow_epoch(&tp(), 4, 100, 10));
        // The former leader's bucket failed: its range went classic.
        assert_eq!(
            m.on_classic_range(&tp(), 100, 150),
            Mode::Classic { until: 150 }
        );
        assert!(!m.follow_epoch(&tp(), 4, 100, 20));
        assert_eq!(m.mode(&tp()), Mode::Classic { until: 150 });
        // The new leader (epoch 5) republishes into its own bucket: back to the WAL path.
        assert!(m.follow_epoch(&tp(), 5, 100, 30));
        assert_eq!(m.mode(&tp()), Mode::Wal);
    }

    #[test]
    fn unknown_partitions_are_left_alone() {
        let mut m = ModeTracker::new(500);
        assert_eq!(m.on_classic_range(&tp(), 0, 10), Mode::Wal);
        assert_eq!(m.tick(&tp(), 0, 10, 10_000), Mode::Wal);
        m.follow(&tp(), 0, 0);
        m.forget(&tp());
        assert!(m.followed().is_empty());
    }
}
