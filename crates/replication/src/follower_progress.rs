//! What a leader knows of one follower: its log end offset and when it was last caught up.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Most (time, leader log end) marks kept per follower. They are kept about 1/32 of the span
/// apart (past this bound every second one is dropped), so they cover any lag at a resolution of
/// a few percent of it.
pub const CAUGHT_UP_MARKS: usize = 64;

/// What the leader knows of one follower.
#[derive(Debug, Clone)]
pub struct FollowerProgress {
    /// The offset of its last Fetch, i.e. its log end offset; -1 before its first fetch.
    pub(crate) log_end_offset: i64,
    /// The last time it was caught up: the latest time at which the leader's log ended at or
    /// below the follower's log end offset now (see [`FollowerProgress::on_fetch`]).
    pub(crate) last_caught_up: Instant,
    /// (time of a fetch, the leader's log end offset then), oldest first, thinned to at most
    /// [`CAUGHT_UP_MARKS`]; only marks the follower has not yet reached are kept.
    pub(crate) marks: VecDeque<(Instant, i64)>,
    /// The high watermark last sent to it; a fetch does not wait while this is behind, so the
    /// follower (which may serve consumers, KIP-392) learns a new high watermark promptly.
    pub(crate) last_sent_high_watermark: i64,
}

impl FollowerProgress {
    pub fn new(now: Instant) -> Self {
        Self {
            log_end_offset: -1,
            last_caught_up: now,
            marks: VecDeque::new(),
            last_sent_high_watermark: -1,
        }
    }

    /// Its log end offset as of its last fetch (-1 before the first).
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    pub fn ms_since_caught_up(&self, now: Instant) -> i64 {
        i64::try_from(now.duration_since(self.last_caught_up).as_millis()).unwrap_or(i64::MAX)
    }

    /// A fetch from `fetch_offset` at `now`, while the leader's log ends at `leader_leo`.
    ///
    /// Kafka's rule, "caught up as of a fetch": a follower whose fetch offset reaches the
    /// leader's log end offset as of an earlier fetch was caught up at that earlier fetch's
    /// time. Kafka only looks at the previous fetch; this looks at every earlier one still
    /// marked, because a remote-WAL follower reports far more often than its data takes to
    /// arrive (it always trails the previous report's log end by one WAL latency, yet holds
    /// what the leader had that latency ago). A follower is then out of sync only when it has
    /// not reached the leader's log end as of any time within `replica.lag.time.max.ms`.
    pub fn on_fetch(&mut self, fetch_offset: i64, leader_leo: i64, now: Instant) {
        self.log_end_offset = fetch_offset;
        if fetch_offset >= leader_leo {
            self.last_caught_up = now;
            self.marks.clear();
            return;
        }
        // The newest mark the follower reached; older ones can never give a later time.
        if let Some(i) = self.marks.iter().rposition(|(_, leo)| *leo <= fetch_offset) {
            let (at, _) = self.marks[i];
            self.last_caught_up = self.last_caught_up.max(at);
            self.marks.drain(..=i);
        }
        // Marks spread evenly over the span the follower trails by: one closer than 1/32 of it
        // to the last is not kept (the older one stands, which errs towards an earlier time).
        let min_gap = self.marks.front().map_or(Duration::ZERO, |(first, _)| {
            now.saturating_duration_since(*first) / (CAUGHT_UP_MARKS as u32 / 2)
        });
        match self.marks.back_mut() {
            // The leader's log still ended there: reaching it means caught up as of now.
            Some(last) if last.1 == leader_leo => last.0 = now,
            Some(last) if now.saturating_duration_since(last.0) < min_gap => {}
            _ => self.marks.push_back((now, leader_leo)),
        }
        if self.marks.len() > CAUGHT_UP_MARKS {
            // Thin out, keeping the newest: the resolution halves, the span stays.
            let keep_parity = (self.marks.len() - 1) % 2;
            let mut i = 0;
            self.marks.retain(|_| {
                let keep = i % 2 == keep_parity;
                i += 1;
                keep
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn caught_up_as_of_a_fetch_from_a_table() {
        let t0 = Instant::now();
        // (ms, follower fetch offset, leader log end then) → ms since caught up, after the fetch
        let table: &[(u64, i64, i64, i64)] = &[
            (0, 0, 0, 0),       // at the leader's end: caught up now
            (10, 0, 5, 10),     // behind: last caught up at 0
            (20, 3, 8, 20),     // reached nothing marked yet (the mark at 10 says 5)
            (30, 5, 9, 20),     // reached the leader's end as of 10 ms: caught up then
            (40, 9, 12, 10),    // reached the leader's end as of 30 ms (the newest mark reached)
            (50, 12, 12, 0),    // at the end again
            (150, 12, 20, 100), // stopped while the leader moved on
        ];
        let mut f = FollowerProgress::new(t0);
        for &(at, fetch_offset, leader_leo, since) in table {
            f.on_fetch(fetch_offset, leader_leo, ms(t0, at));
            assert_eq!(f.log_end_offset(), fetch_offset);
            assert_eq!(
                f.ms_since_caught_up(ms(t0, at)),
                since,
                "at {at} ms: fetch {fetch_offset}, leader at {leader_leo}"
            );
        }
    }

    #[test]
    fn caught_up_marks_stay_bounded_and_never_date_a_follower_too_late() {
        let t0 = Instant::now();
        let mut f = FollowerProgress::new(t0);
        // The leader grows one offset per ms; the follower's lag grows by one ms every ms.
        for ms in 1..=10_000i64 {
            let now = t0 + Duration::from_millis(ms as u64);
            f.on_fetch(ms / 2, ms, now);
            assert!(f.marks.len() <= CAUGHT_UP_MARKS, "{} marks", f.marks.len());
            // It holds what the leader had at ms/2: never dated later than that.
            let caught_up_ms = f.last_caught_up.duration_since(t0).as_millis() as i64;
            assert!(caught_up_ms <= ms / 2, "at {ms}: dated {caught_up_ms}");
            // ...and not much earlier either: the marks' resolution is a few percent of the lag.
            assert!(
                caught_up_ms >= ms / 2 - ms / 32 - 2,
                "at {ms}: dated {caught_up_ms}"
            );
        }
    }
}
