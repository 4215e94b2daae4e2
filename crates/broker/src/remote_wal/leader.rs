//! The leader side: hands appended batches to the uploader, remembers the ranges the uploader
//! dropped from the WAL path, and decides when a follower's WAL report must be answered with
//! data (the classic fetch) instead of offsets only.
//!
//! A follower on the WAL path is "behind" when it lacks offsets the leader had
//! `remote.wal.fallback.ms` ago (a slow or failing store, lost metadata, a follower that just
//! started far behind), or when its fetch offset lies in a range the uploader dropped. The
//! leader keeps, per partition, a short history of its log end offset to answer the first
//! question; a follower within that window counts as caught up for the ISR (the classic rule,
//! "reached the leader's log end as of its previous fetch", would fail for every WAL follower
//! under steady load: its reports are more frequent than the WAL's latency).

use std::collections::{HashMap, VecDeque};

use ferry_common::TopicPartition;
use ferry_log::AppendInfo;
use ferry_wal::uploader::{ClassicFallback, WalAppend};

use crate::replica_manager::Partition;

/// The batches of a leader append as the log stored them (it rewrote offsets and epochs), for
/// the uploader. `None` (logged) if they cannot be read back; followers then get that range
/// classically.
pub fn stored_append(p: &Partition, info: &AppendInfo) -> Option<WalAppend> {
    let stored = p.log.read(
        info.first_offset,
        info.bytes.max(1),
        info.last_offset + 1,
        true,
    );
    match stored {
        Ok(d) if !d.records.is_empty() => Some(WalAppend {
            tp: p.tp.clone(),
            topic_id: p.topic_id,
            base_offset: info.first_offset,
            last_offset: info.last_offset,
            leader_epoch: p.leader_epoch(),
            records: d.records,
        }),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(partition = %p.tp, error = %e, "cannot read back appended batches for the remote WAL");
            None
        }
    }
}

/// Log-end samples kept per partition (one per `SAMPLE_EVERY_MS` at most).
const SAMPLE_EVERY_MS: i64 = 5;

#[derive(Debug, Default)]
struct Track {
    /// (time, log end offset), oldest first.
    samples: VecDeque<(i64, i64)>,
    /// Ranges `[from, end)` the uploader dropped.
    fallbacks: Vec<(i64, i64)>,
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
        // Keep one sample older than the window so `leo_at` stays exact.
        let horizon = now_ms - 2 * self.fallback_ms;
        while t.samples.len() > 2 && t.samples.get(1).is_some_and(|s| s.0 <= horizon) {
            t.samples.pop_front();
        }
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

    /// A follower reported `fetch_offset`. Returns (caught up within the WAL window, serve it
    /// data by the classic fetch).
    pub fn on_report(
        &mut self,
        tp: &TopicPartition,
        fetch_offset: i64,
        now_ms: i64,
    ) -> (bool, bool) {
        let then = self.leo_at(tp, now_ms - self.fallback_ms);
        let caught_up = fetch_offset >= then;
        let in_fallback = self.parts.get_mut(tp).is_some_and(|t| {
            // Ranges every report has passed are done with (followers report their own LEO).
            t.fallbacks
                .iter()
                .any(|(from, end)| fetch_offset >= *from && fetch_offset < *end)
        });
        (caught_up, !caught_up || in_fallback)
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
    use ferry_wal::uploader::FallbackReason;
    use uuid::Uuid;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    #[test]
    fn a_follower_lacking_what_the_leader_had_a_window_ago_is_served_classically() {
        let mut l = LeaderTracker::new(500);
        l.on_append(&tp(), 100, 0);
        l.on_append(&tp(), 200, 400);
        // At 450 the leader had 0 as of -50: everyone is caught up.
        assert_eq!(l.on_report(&tp(), 50, 450), (true, false));
        // At 600 the leader had 100 as of 100: 50 is behind, 100 is fine.
        assert_eq!(l.on_report(&tp(), 50, 600), (false, true));
        assert_eq!(l.on_report(&tp(), 100, 600), (true, false));
        // At 1000 the leader had 200 as of 500.
        assert_eq!(l.on_report(&tp(), 150, 1000), (false, true));
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
        assert_eq!(l.on_report(&tp(), 99, 10), (true, false));
        assert_eq!(l.on_report(&tp(), 150, 10), (true, true));
        assert_eq!(l.on_report(&tp(), 200, 10), (true, false));
        l.prune(&tp(), 200);
        assert_eq!(l.on_report(&tp(), 150, 10), (true, false));
    }

    #[test]
    fn history_stays_bounded() {
        let mut l = LeaderTracker::new(100);
        for i in 0..10_000 {
            l.on_append(&tp(), i, i);
        }
        assert!(l.parts[&tp()].samples.len() < 100);
        assert_eq!(l.leo_at(&tp(), 9_802), 9_800);
    }
}
