//! What a new leader of a remote-WAL partition republishes into its own rack's bucket
//! (KIP-1176 "Leader Failover and Recovery in an AZ Outage"), as pure functions: the effective
//! local retention of a topic, and the offset range it keeps. The broker's task that reads the
//! log and hands it to the uploader is `crates/broker/src/remote_wal/republish.rs`.

/// The effective `local.retention.ms` in ms, from the topic's `local.retention.ms` and
/// `retention.ms` (`None`: keep forever). As in Kafka, -2 means `retention.ms`, and local
/// retention never exceeds `retention.ms`.
pub fn effective_local_retention(local_ms: i64, retention_ms: i64) -> Option<i64> {
    let retention = (retention_ms >= 0).then_some(retention_ms);
    let local = match local_ms {
        -2 => retention,
        ms if ms >= 0 => Some(ms),
        _ => None,
    };
    match (local, retention) {
        (Some(l), Some(r)) => Some(l.min(r)),
        (l, r) => l.or(r),
    }
}

/// The range `[from, to)` a new leader republishes: from the first segment (`segments`: base
/// offset and largest timestamp, oldest first) whose newest record is within `local_retention_ms`
/// of `now_ms`, never below the log start offset, up to `epoch_start` (where the new epoch's own
/// appends begin). `None` when there is nothing to republish.
pub fn republish_range(
    segments: &[(i64, i64)],
    log_start: i64,
    epoch_start: i64,
    now_ms: i64,
    local_retention_ms: Option<i64>,
) -> Option<(i64, i64)> {
    let from = match local_retention_ms {
        None => log_start,
        Some(ms) => segments
            .iter()
            .find(|(_, largest)| now_ms.saturating_sub(*largest) <= ms)
            .map_or(epoch_start, |(base, _)| *base),
    }
    .max(log_start);
    (from < epoch_start).then_some((from, epoch_start))
}

/// `remote.wal.failover.republish=optimized` (KIP-1176 "Optimized Approach"): the part of the
/// comprehensive `range` the long-term tier does not hold, the tier holding the partition up to
/// `tiered_end` inclusive (`None`: nothing tiered, or not a tiered topic; then the whole range).
/// A follower that needs the left-out part fetches it from the leader, or from the tier once
/// it is below the leader's local log start. `None` when the tier holds the whole range.
pub fn skip_tiered(range: (i64, i64), tiered_end: Option<i64>) -> Option<(i64, i64)> {
    match tiered_end {
        Some(end) => start_at_least(range, end.saturating_add(1)),
        None => start_at_least(range, range.0),
    }
}

/// `range` without what lies below `floor`; `None` when nothing is left.
fn start_at_least((from, to): (i64, i64), floor: i64) -> Option<(i64, i64)> {
    let from = from.max(floor);
    (from < to).then_some((from, to))
}

/// `optimized` also leaves out what every replica in the ISR holds: the part of `range` below
/// `high_watermark`, the high watermark the new leader knew as a follower (the former leader's
/// lags it a little, never the other way). Every replica in the ISR when leadership moved holds
/// at least that, so a clean move (a controlled shutdown, a preferred-leader election, a
/// rolling restart) republishes only the uncommitted tail instead of the whole local log. A
/// replica that was out of the ISR already fetches what it lacks below it from the leader.
/// `None` when nothing is left.
pub fn skip_replicated(range: (i64, i64), high_watermark: i64) -> Option<(i64, i64)> {
    start_at_least(range, high_watermark)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_retention_follows_kafka_defaults() {
        // -2: retention.ms.
        assert_eq!(effective_local_retention(-2, 7_000), Some(7_000));
        assert_eq!(effective_local_retention(-2, -1), None);
        // Never beyond retention.ms.
        assert_eq!(effective_local_retention(10_000, 7_000), Some(7_000));
        assert_eq!(effective_local_retention(1_000, 7_000), Some(1_000));
        assert_eq!(effective_local_retention(1_000, -1), Some(1_000));
        // -1: forever, unless retention.ms is shorter.
        assert_eq!(effective_local_retention(-1, -1), None);
        assert_eq!(effective_local_retention(-1, 7_000), Some(7_000));
    }

    /// Issue 14: `optimized` leaves out what the tier holds; `comprehensive` is the range
    /// itself (the caller does not call this).
    #[test]
    fn optimized_republish_skips_what_the_tier_holds() {
        assert_eq!(skip_tiered((100, 250), None), Some((100, 250)));
        assert_eq!(skip_tiered((100, 250), Some(50)), Some((100, 250)));
        assert_eq!(skip_tiered((100, 250), Some(100)), Some((101, 250)));
        assert_eq!(skip_tiered((100, 250), Some(199)), Some((200, 250)));
        assert_eq!(skip_tiered((100, 250), Some(249)), None);
        assert_eq!(skip_tiered((100, 250), Some(400)), None);
    }

    /// `optimized` leaves out what every replica in the ISR holds (below the high watermark).
    #[test]
    fn optimized_republish_skips_what_every_replica_in_sync_holds() {
        assert_eq!(skip_replicated((100, 250), 0), Some((100, 250)));
        assert_eq!(skip_replicated((100, 250), 180), Some((180, 250)));
        // A clean move: everything below the new epoch was committed.
        assert_eq!(skip_replicated((100, 250), 250), None);
        assert_eq!(skip_replicated((100, 250), -1), Some((100, 250)));
    }

    #[test]
    fn republish_starts_at_the_first_segment_within_local_retention() {
        // Segments at 0, 100, 200 (active) whose newest records are at 1s, 5s and 9s.
        let segs = [(0, 1_000), (100, 5_000), (200, 9_000)];
        // At 10s with 6s local retention: segment 0 expired, 100 not.
        assert_eq!(
            republish_range(&segs, 0, 250, 10_000, Some(6_000)),
            Some((100, 250))
        );
        // The boundary itself is kept (retention deletes only what is strictly older).
        assert_eq!(
            republish_range(&segs, 0, 250, 11_000, Some(6_000)),
            Some((100, 250))
        );
        // Forever: from the log start, also when it lies inside the first segment.
        assert_eq!(
            republish_range(&segs, 42, 250, 10_000, None),
            Some((42, 250))
        );
        // Never below the log start offset.
        assert_eq!(
            republish_range(&segs, 150, 250, 10_000, Some(6_000)),
            Some((150, 250))
        );
        // Everything expired, or nothing before the new epoch: nothing to republish.
        assert_eq!(republish_range(&segs, 0, 250, 100_000, Some(1)), None);
        assert_eq!(republish_range(&segs, 0, 0, 10_000, None), None);
        assert_eq!(republish_range(&segs, 250, 250, 10_000, None), None);
    }
}
