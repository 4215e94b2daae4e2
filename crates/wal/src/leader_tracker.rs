//! The leader side of the WAL path, as pure state (time is passed in): remembers the ranges the
//! uploader dropped from the WAL path and decides when a follower's WAL report must be answered
//! with data (the classic fetch) instead of offsets only. The broker feeds it appends,
//! publishes and reports (`crates/broker/src/remote_wal/`).
//!
//! A report gets data when the follower's fetch offset lies in a range the uploader dropped;
//! when it lacks data whose metadata was published `remote.wal.fallback.ms` ago or earlier and
//! has not moved for as long (the WAL path failed this follower: metadata lost, an object it
//! cannot read; a follower still moving is on a slow path, not a broken one); when it holds all
//! that was published but has not moved for `remote.wal.fallback.ms` while the leader's log is
//! longer (uploads stuck: a slow or failing store); or when it is far behind: it lacks what the leader
//! had `FAR_BEHIND_FACTOR` fallback windows ago and what the leader's WAL objects still hold (a
//! follower back after the objects' lifetime, a new replica below them). The leader keeps a
//! short history of its log end offset per partition for that. Whether a follower is in sync is not decided here: every report is a follower fetch
//! to the replica manager, whose rule ("caught up to the leader's log end as of some earlier
//! fetch", the broker's `replica_manager::FollowerState::on_fetch`) holds for a WAL follower that trails by
//! its WAL latency as it does for a classic one.
//!
//! Why published offsets and not only "the follower has not moved": on a loaded machine the
//! whole WAL path (upload, metadata, download) can pause for longer than the fallback window
//! while still delivering; timing the follower against what was published tells a slow path
//! from a broken one, so a busy cluster does not send its data across zones.

use std::collections::{HashMap, VecDeque};

use ferry_common::TopicPartition;

use crate::uploader::ClassicFallback;

/// Why a follower's report is answered with records (the classic fetch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassicReason {
    /// Its fetch offset lies in a range the uploader dropped.
    DroppedRange,
    /// It lacks data published a fallback window ago.
    WalFailed,
    /// It holds all that was published but has not moved for a fallback window.
    UploadsStuck,
    /// It lacks what the leader had `FAR_BEHIND_FACTOR` windows ago.
    FarBehind,
}

impl ClassicReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DroppedRange => "dropped_range",
            Self::WalFailed => "wal_failed",
            Self::UploadsStuck => "uploads_stuck",
            Self::FarBehind => "far_behind",
        }
    }
}

/// Log-end samples kept per partition (one per `SAMPLE_EVERY_MS` at most).
const SAMPLE_EVERY_MS: i64 = 5;
/// "Far behind": lacking what the leader had this many fallback windows ago.
pub const FAR_BEHIND_FACTOR: i64 = 10;
/// A follower outside the ISR catching up through the objects kept for it counts as not moving
/// (`wal_failed`) after this many fallback windows: it holds back no acknowledgement, and after
/// an outage it first replays metadata and confirms its log. The follower's own stall check
/// (`crate::mode_tracker`, used by the broker with the same factor) agrees.
pub const CATCH_UP_FACTOR: i64 = 4;

#[derive(Debug, Default)]
struct Track {
    /// (time, log end offset), oldest first.
    samples: VecDeque<(i64, i64)>,
    /// (time, end offset of the published WAL data), oldest first.
    published: VecDeque<(i64, i64)>,
    /// Ranges `[from, end)` the uploader dropped.
    fallbacks: Vec<(i64, i64)>,
    /// Per follower: last reported offset, when it last moved, and when it last reported.
    followers: HashMap<i32, (i64, i64, i64)>,
}

/// What the leader knows of a follower beyond its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerView {
    /// The oldest offset of the partition the leader's WAL objects still hold (`None`: nothing,
    /// or not known).
    pub held_from: Option<i64>,
    /// Whether the follower is in the partition's ISR (it holds back acks=all).
    pub in_isr: bool,
}

/// Per-partition leader state of the WAL path (pure; time is passed in).
#[derive(Debug)]
pub struct LeaderTracker {
    fallback_ms: i64,
    parts: HashMap<TopicPartition, Track>,
}

impl LeaderTracker {
    pub fn new(fallback_ms: i64) -> Self {
        Self {
            fallback_ms,
            parts: HashMap::new(),
        }
    }

    /// The leader's log end moved to `leo` at `now_ms`.
    pub fn on_append(&mut self, tp: &TopicPartition, leo: i64, now_ms: i64) {
        let t = self.parts.entry(tp.clone()).or_default();
        // Within a sampling step the older sample stands: `leo_at` may then under-estimate by
        // a few ms of appends, which errs towards the WAL path.
        if t.samples
            .back()
            .is_none_or(|last| now_ms - last.0 >= SAMPLE_EVERY_MS)
        {
            t.samples.push_back((now_ms, leo));
        }
        // Keep one sample older than the far-behind window so `leo_at` stays exact.
        let horizon = now_ms - (FAR_BEHIND_FACTOR + 1) * self.fallback_ms;
        while t.samples.len() > 2 && t.samples.get(1).is_some_and(|s| s.0 <= horizon) {
            t.samples.pop_front();
        }
    }

    /// WAL metadata covering `tp` up to `end` (exclusive) was published at `now_ms`.
    pub fn on_published(&mut self, tp: &TopicPartition, end: i64, now_ms: i64) {
        let t = self.parts.entry(tp.clone()).or_default();
        if t.published.back().is_some_and(|last| last.1 >= end) {
            return;
        }
        if t.published
            .back()
            .is_some_and(|last| now_ms - last.0 < SAMPLE_EVERY_MS)
        {
            // Within a sampling step the newer end replaces the older: `published_at` may then
            // date it a few ms late, which errs towards the WAL path.
            if let Some(last) = t.published.back_mut() {
                last.1 = end;
            }
        } else {
            t.published.push_back((now_ms, end));
        }
        let horizon = now_ms - 2 * self.fallback_ms;
        while t.published.len() > 2 && t.published.get(1).is_some_and(|s| s.0 <= horizon) {
            t.published.pop_front();
        }
    }

    /// The end of what was published by `at_ms` (-1: nothing known).
    fn published_at(&self, tp: &TopicPartition, at_ms: i64) -> i64 {
        self.parts
            .get(tp)
            .and_then(|t| t.published.iter().rev().find(|s| s.0 <= at_ms))
            .map_or(-1, |s| s.1)
    }

    pub fn on_fallback(&mut self, f: &ClassicFallback) {
        let t = self.parts.entry(f.tp.clone()).or_default();
        t.fallbacks.push((f.from_offset, f.end_offset));
        if t.fallbacks.len() > 1024 {
            t.fallbacks.remove(0);
        }
    }

    /// The leader's log end as of `at_ms` (the newest sample not after it; 0 if none).
    fn leo_at(&self, tp: &TopicPartition, at_ms: i64) -> i64 {
        self.parts
            .get(tp)
            .and_then(|t| t.samples.iter().rev().find(|s| s.0 <= at_ms))
            .map_or(0, |s| s.1)
    }

    /// Follower `replica` reported `fetch_offset` while the leader's log ends at `leader_leo`.
    /// Returns why to serve it data by the classic fetch, if so. Knows nothing of the WAL
    /// objects still kept: see [`LeaderTracker::on_report_held`].
    pub fn on_report(
        &mut self,
        tp: &TopicPartition,
        replica: i32,
        fetch_offset: i64,
        leader_leo: i64,
        now_ms: i64,
    ) -> Option<ClassicReason> {
        let unknown = FollowerView {
            held_from: None,
            in_isr: true,
        };
        self.on_report_held(tp, replica, fetch_offset, leader_leo, now_ms, unknown)
    }

    /// [`LeaderTracker::on_report`], knowing how far back the leader's WAL objects still hold
    /// the partition and whether the follower is in the ISR ([`FollowerView`]).
    ///
    /// A follower far behind but at or above `held_from` catches up through the objects, so it
    /// is not served classically for being far behind: that would send its backlog across
    /// zones. This holds in the ISR too: there, far behind means a WAL path slower than the
    /// produce rate on a saturated cluster, and the classic fetch would only move the same
    /// bytes across zones on the same busy machines (7.7 GB acks=1 cluster runs sent 0.5-6 % of
    /// the produced bytes across racks that way). A follower that falls behind for longer than
    /// `replica.lag.time.max.ms` leaves the ISR, as a slow Kafka follower does. If its WAL path
    /// fails, the other rules still apply; outside the ISR (it holds back no acknowledgement,
    /// and first replays metadata and confirms its log) `wal_failed` waits
    /// [`CATCH_UP_FACTOR`] fallback windows, inside one.
    pub fn on_report_held(
        &mut self,
        tp: &TopicPartition,
        replica: i32,
        fetch_offset: i64,
        leader_leo: i64,
        now_ms: i64,
        view: FollowerView,
    ) -> Option<ClassicReason> {
        let held_from = view.held_from;
        let far_then = self.leo_at(tp, now_ms - FAR_BEHIND_FACTOR * self.fallback_ms);
        let published_then = self.published_at(tp, now_ms - self.fallback_ms);
        let published_now = self.published_at(tp, i64::MAX);
        let t = self.parts.entry(tp.clone()).or_default();
        // A follower silent for a fallback window (stopped, restarted, partitioned away) starts
        // afresh: otherwise a follower back from an outage would count the outage as "not
        // moving" and be served its whole backlog classically at its first report.
        let fresh = t.followers.get(&replica).is_none_or(|(last, _, seen)| {
            *last != fetch_offset || now_ms.saturating_sub(*seen) >= self.fallback_ms
        });
        let entry = t
            .followers
            .entry(replica)
            .or_insert((fetch_offset, now_ms, now_ms));
        if fresh {
            *entry = (fetch_offset, now_ms, now_ms);
        }
        entry.2 = now_ms;
        let behind = fetch_offset < leader_leo;
        let still = now_ms - entry.1 >= self.fallback_ms;
        let catching_up = !view.in_isr && held_from.is_some_and(|h| fetch_offset >= h);
        let window = if catching_up {
            CATCH_UP_FACTOR * self.fallback_ms
        } else {
            self.fallback_ms
        };
        // Published a fallback window ago, still missing, and not moving: the WAL path failed
        // this follower. One that moves is downloading (a saturated machine lags publication
        // without anything being broken); if it falls too far behind, `far_behind` decides.
        let wal_failed = fetch_offset < published_then && now_ms - entry.1 >= window;
        // Holds everything published, yet behind and not moving: the uploads are stuck.
        let uploads_stuck = behind && fetch_offset >= published_now && still;
        let far_behind = fetch_offset < far_then && held_from.is_none_or(|h| fetch_offset < h);
        let in_fallback = t
            .fallbacks
            .iter()
            .any(|(from, end)| fetch_offset >= *from && fetch_offset < *end);
        if in_fallback {
            Some(ClassicReason::DroppedRange)
        } else if far_behind {
            Some(ClassicReason::FarBehind)
        } else if wal_failed {
            Some(ClassicReason::WalFailed)
        } else if uploads_stuck {
            Some(ClassicReason::UploadsStuck)
        } else {
            None
        }
    }

    /// Drops ranges below `min_follower_leo` (every follower has them).
    pub fn prune(&mut self, tp: &TopicPartition, min_follower_leo: i64) {
        if let Some(t) = self.parts.get_mut(tp) {
            t.fallbacks.retain(|(_, end)| *end > min_follower_leo);
        }
    }

    /// Keeps only the partitions still led here on the WAL path.
    pub fn retain(&mut self, led: &std::collections::HashSet<TopicPartition>) {
        self.parts.retain(|tp, _| led.contains(tp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uploader::FallbackReason;
    use uuid::Uuid;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    /// A follower outside the ISR; the leader's objects hold the partition from `held_from`.
    fn outside_isr(held_from: Option<i64>) -> FollowerView {
        FollowerView {
            held_from,
            in_isr: false,
        }
    }

    /// Served classically.
    fn classic(r: Option<ClassicReason>) -> bool {
        r.is_some()
    }

    #[test]
    fn a_follower_missing_what_was_published_a_window_ago_is_served_classically() {
        let mut l = LeaderTracker::new(500);
        l.on_append(&tp(), 100, 0);
        l.on_published(&tp(), 80, 10);
        // Published 80 at t=10: a follower at 60 may still be downloading it...
        assert!(!classic(l.on_report(&tp(), 2, 50, 100, 0)));
        assert!(!classic(l.on_report(&tp(), 2, 60, 100, 400)));
        // ...however long it has not moved, while the publication is younger than the window
        // (a slow path, not a broken one).
        assert!(!classic(l.on_report(&tp(), 2, 60, 100, 509)));
        // Published a full window ago and still missing, but it moved within the window: a
        // slow path still delivering, not a broken one.
        assert!(!classic(l.on_report(&tp(), 2, 60, 100, 510)));
        assert!(!classic(l.on_report(&tp(), 2, 70, 100, 800)));
        // Missing it and not moving for a window: classic.
        assert!(!classic(l.on_report(&tp(), 2, 70, 100, 1_299)));
        assert!(classic(l.on_report(&tp(), 2, 70, 100, 1_300)));
        // A follower holding all that was published waits for the uploads...
        assert!(!classic(l.on_report(&tp(), 3, 80, 100, 510)));
        assert!(!classic(l.on_report(&tp(), 3, 80, 100, 900)));
        // ...unless they are stuck: not moving for the window while the leader is ahead.
        assert!(classic(l.on_report(&tp(), 3, 80, 100, 1_010)));
    }

    #[test]
    fn a_stalled_or_far_behind_follower_is_served_classically() {
        let mut l = LeaderTracker::new(500);
        l.on_append(&tp(), 100, 0);
        // Behind but moving: stays on the WAL path.
        assert!(!classic(l.on_report(&tp(), 2, 50, 100, 100)));
        assert!(!classic(l.on_report(&tp(), 2, 60, 100, 400)));
        // Nothing published, not moving for the fallback window while the leader is ahead:
        // classic.
        assert!(!classic(l.on_report(&tp(), 2, 60, 100, 899)));
        assert!(classic(l.on_report(&tp(), 2, 60, 100, 900)));
        // Caught up: nothing to serve however long it sits there.
        assert!(!classic(l.on_report(&tp(), 2, 100, 100, 5_000)));
        assert!(!classic(l.on_report(&tp(), 2, 100, 100, 9_000)));
        // Far behind (lacks what the leader had 10 windows ago), even while moving.
        l.on_append(&tp(), 200, 9_000);
        assert!(!classic(l.on_report(&tp(), 3, 150, 200, 13_900)));
        assert!(classic(l.on_report(&tp(), 3, 160, 200, 14_000)));
    }

    /// Issue 14: a follower back from an outage at the offset it last reported has not been
    /// "not moving" all that time: it starts a fresh window.
    #[test]
    fn a_follower_silent_for_a_window_starts_afresh() {
        let mut l = LeaderTracker::new(500);
        l.on_append(&tp(), 100, 0);
        l.on_published(&tp(), 100, 0);
        // The objects still hold offset 60: not served for being far behind.
        let mut report = |at| l.on_report_held(&tp(), 2, 60, 100, at, outside_isr(Some(0)));
        assert!(!classic(report(0)));
        // Silent from 0 to 5_000 (stopped), then reports the same offset.
        assert!(!classic(report(5_000)));
        // Reporting but not moving for the catching-up window now: the WAL path failed it.
        for at in (5_400..7_000).step_by(400) {
            assert!(!classic(report(at)), "{at}");
        }
        assert!(classic(report(7_000)));
    }

    /// Issue 14: a follower far behind (restarted after a long outage) whose offset the leader's
    /// WAL objects still hold catches up through them; below them, classically.
    #[test]
    fn a_far_behind_follower_the_objects_still_reach_stays_on_the_wal_path() {
        let mut l = LeaderTracker::new(500);
        l.on_append(&tp(), 100, 0);
        l.on_append(&tp(), 10_000, 9_000);
        let report = |l: &mut LeaderTracker, offset, now, held| {
            l.on_report_held(&tp(), 2, offset, 10_000, now, outside_isr(held))
        };
        assert_eq!(
            report(&mut l, 50, 14_000, None),
            Some(ClassicReason::FarBehind)
        );
        assert_eq!(
            report(&mut l, 60, 14_100, Some(70)),
            Some(ClassicReason::FarBehind),
            "below the oldest object kept"
        );
        assert_eq!(report(&mut l, 70, 14_200, Some(70)), None);
        assert_eq!(report(&mut l, 5_000, 14_300, Some(70)), None);
        // Stuck there for a window while the data was published: the WAL path failed it.
        l.on_published(&tp(), 10_000, 14_300);
        for at in (14_600..16_300).step_by(400) {
            assert_eq!(report(&mut l, 5_000, at, Some(70)), None, "{at}");
        }
        assert_eq!(
            report(&mut l, 5_000, 16_300, Some(70)),
            Some(ClassicReason::WalFailed),
            "not moving for 4 windows (catching up from the objects)"
        );
    }

    /// At full load a follower in the ISR can fall far behind while it keeps moving (a WAL
    /// path slower than the produce rate on a saturated cluster). While the objects hold its
    /// offset it stays on the WAL path; it has one fallback window, not four, to move, since
    /// it holds back acks=all.
    #[test]
    fn a_far_behind_follower_in_the_isr_stays_on_the_wal_path_while_moving() {
        let mut l = LeaderTracker::new(500);
        l.on_append(&tp(), 100, 0);
        l.on_append(&tp(), 10_000, 9_000);
        let in_isr = FollowerView {
            held_from: Some(70),
            in_isr: true,
        };
        let mut report = |offset, now| l.on_report_held(&tp(), 2, offset, 10_000, now, in_isr);
        assert_eq!(report(80, 14_000), None, "far behind, within the objects");
        assert_eq!(report(90, 14_400), None);
        assert_eq!(
            report(60, 14_500),
            Some(ClassicReason::FarBehind),
            "below the oldest object kept"
        );
        l.on_published(&tp(), 10_000, 14_500);
        let mut report = |offset, now| l.on_report_held(&tp(), 2, offset, 10_000, now, in_isr);
        assert_eq!(report(5_000, 14_600), None);
        assert_eq!(report(5_000, 15_099), None);
        assert_eq!(
            report(5_000, 15_100),
            Some(ClassicReason::WalFailed),
            "not moving for one window"
        );
    }

    #[test]
    fn a_dropped_range_is_served_classically_until_every_follower_passed_it() {
        let mut l = LeaderTracker::new(500);
        l.on_append(&tp(), 300, 0);
        l.on_fallback(&ClassicFallback {
            tp: tp(),
            topic_id: Uuid::nil(),
            from_offset: 100,
            end_offset: 200,
            reason: FallbackReason::BufferFull,
        });
        assert!(!classic(l.on_report(&tp(), 2, 99, 300, 10)));
        assert!(classic(l.on_report(&tp(), 2, 150, 300, 10)));
        assert!(!classic(l.on_report(&tp(), 2, 200, 300, 10)));
        l.prune(&tp(), 200);
        assert!(!classic(l.on_report(&tp(), 3, 150, 300, 10)));
    }

    #[test]
    fn history_stays_bounded() {
        let mut l = LeaderTracker::new(100);
        for i in 0..10_000 {
            l.on_append(&tp(), i, i);
        }
        assert!(l.parts[&tp()].samples.len() < 300);
        assert_eq!(l.leo_at(&tp(), 9_802), 9_800);
    }
}
