//! The rules from tables: each row is a state, an event and a time, and what must follow.

use super::*;

const LEADER: BrokerId = 1;

fn image(
    leader: BrokerId,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[BrokerId],
) -> PartitionState {
    PartitionState {
        leader,
        leader_epoch,
        partition_epoch,
        replicas: vec![1, 2, 3],
        isr: isr.to_vec(),
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }
}

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

/// Broker 1 leading at epoch 0 with `isr`, its log ending at `log_end`.
fn leader(isr: &[BrokerId], log_end: i64, t0: Instant) -> ReplicaState {
    let mut st = ReplicaState::new(Uuid::nil(), 0, LEADER, log_end);
    st.apply(&image(LEADER, 0, 0, isr), log_end, t0);
    st
}

#[test]
fn role_changes_from_the_image() {
    let t0 = Instant::now();
    // (leader, leader epoch) of successive images as broker 2 sees them
    //   → (became a follower of a new leader or epoch, role afterwards)
    let table: &[(BrokerId, i32, bool, Role)] = &[
        (1, 0, true, Role::Follower { leader: 1 }), // first image: follows 1
        (1, 0, false, Role::Follower { leader: 1 }), // same leader and epoch: nothing new
        (1, 1, true, Role::Follower { leader: 1 }), // new epoch: truncation check again
        (2, 2, false, Role::Leader),                // leads
        (NO_LEADER, 3, false, Role::Follower { leader: NO_LEADER }), // no leader: nothing to fetch
        (3, 4, true, Role::Follower { leader: 3 }),
    ];
    let mut st = ReplicaState::new(Uuid::nil(), 0, 2, 0);
    for (i, &(leader, epoch, new_follower, role)) in table.iter().enumerate() {
        assert_eq!(
            st.apply(&image(leader, epoch, epoch, &[1, 2, 3]), 10, t0),
            new_follower,
            "row {i}"
        );
        assert_eq!(st.role(), role, "row {i}");
        assert_eq!(st.leader_epoch(), epoch, "row {i}");
    }
}

#[test]
fn high_watermark_over_the_isr_from_a_table() {
    let t0 = Instant::now();
    // (ISR, follower fetch offsets, leader log end) → the ISR's high watermark
    let table: &[(&[BrokerId], &[(BrokerId, i64)], i64, Option<i64>)] = &[
        (&[1], &[], 7, Some(7)),                     // alone: the log end
        (&[1, 2, 3], &[(2, 5), (3, 6)], 7, Some(5)), // the least of the ISR
        (&[1, 2], &[(2, 5), (3, 1)], 7, Some(5)),    // 3 is outside the ISR
        (&[1, 2, 3], &[(2, 5)], 7, None),            // 3 has not fetched yet
        (&[1, 2], &[(2, 9)], 7, None),               // past the log end: not recorded
        (&[1, 2], &[(2, 7)], 7, Some(7)),            // caught up
    ];
    for (i, &(isr, fetches, log_end, want)) in table.iter().enumerate() {
        let mut st = leader(isr, log_end, t0);
        for &(replica, offset) in fetches {
            st.on_follower_fetch(replica, offset, log_end, t0);
        }
        assert_eq!(st.isr_high_watermark(log_end), want, "row {i}");
    }
}

#[test]
fn commit_rule_from_a_table() {
    let t0 = Instant::now();
    let led = leader(&[1, 2], 10, t0); // epoch 0
    let mut followed = ReplicaState::new(Uuid::nil(), 0, LEADER, 10);
    followed.apply(&image(2, 1, 1, &[1, 2]), 10, t0);
    // (state, epoch of the append, its end offset, high watermark) → status
    let table: &[(&ReplicaState, i32, i64, i64, CommitStatus)] = &[
        (&led, 0, 8, 7, CommitStatus::Pending),
        (&led, 0, 8, 8, CommitStatus::Committed),
        (&led, 0, 8, 10, CommitStatus::Committed),
        (&led, 1, 8, 10, CommitStatus::LeadershipLost), // appended at another epoch
        (&followed, 0, 8, 10, CommitStatus::LeadershipLost), // no longer leader
    ];
    for (i, &(st, epoch, end, hw, want)) in table.iter().enumerate() {
        assert_eq!(st.commit_status(epoch, end, hw), want, "row {i}");
    }
}

/// One event on a leader of epoch 0 whose ISR is {1, 2} and whose log ends at 10; follower 2
/// is caught up at 10 and follower 3 is outside the ISR.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// Follower 3 fetches from this offset at this ms, and an expansion is asked for.
    Fetch3(i64, u64),
    /// The answer to the last proposal, at this ms.
    Finished(IsrOutcome, u64),
    /// A new image with this partition epoch (ISR unchanged).
    Image(i32),
}

#[test]
fn isr_expansion_from_a_table() {
    use Event::*;
    use IsrOutcome::*;
    // Each row: the events in turn, and whether each proposed a change.
    let table: &[(&str, &[(Event, bool)])] = &[
        (
            "not caught up, then caught up",
            &[(Fetch3(5, 0), false), (Fetch3(10, 1), true)],
        ),
        (
            "one change in flight at a time, until the image moves",
            &[
                (Fetch3(10, 0), true),
                (Fetch3(10, 1), false),
                (Image(1), false),
                (Fetch3(10, 2), true),
            ],
        ),
        (
            "an answer that awaits the image holds for the change timeout",
            &[
                (Fetch3(10, 0), true),
                (Finished(AwaitImage, 0), false),
                (Fetch3(10, 4_999), false),
                (Fetch3(10, 5_000), true),
            ],
        ),
        (
            "refused: proposed again after the back-off",
            &[
                (Fetch3(10, 0), true),
                (Finished(Refused, 0), false),
                (Fetch3(10, 999), false),
                (Fetch3(10, 1_000), true),
            ],
        ),
        (
            "controller unavailable: the same back-off",
            &[
                (Fetch3(10, 0), true),
                (Finished(Unavailable, 0), false),
                (Fetch3(10, 1_000), true),
            ],
        ),
    ];
    let t0 = Instant::now();
    for (name, events) in table {
        let mut st = leader(&[1, 2], 10, t0);
        st.on_follower_fetch(2, 10, 10, t0);
        let mut last: Option<IsrChange> = None;
        for (i, &(event, proposes)) in events.iter().enumerate() {
            let proposed = match event {
                Fetch3(offset, ms) => {
                    assert!(st.on_follower_fetch(3, offset, 10, at(t0, ms)));
                    let hw = st.isr_high_watermark(10).unwrap_or(0);
                    let change = st.propose_expansion(3, offset, hw, at(t0, ms));
                    let proposed = change.is_some();
                    if let Some(c) = change {
                        assert_eq!(
                            (c.current_isr.as_slice(), c.new_isr.as_slice()),
                            (&[1, 2][..], &[1, 2, 3][..])
                        );
                        assert!(c.expands);
                        last = Some(c);
                    }
                    proposed
                }
                Finished(outcome, ms) => {
                    let change = last.clone().expect("a change was proposed");
                    st.isr_change_finished(&change, outcome, at(t0, ms));
                    false
                }
                Image(partition_epoch) => {
                    st.apply(&image(LEADER, 0, partition_epoch, &[1, 2]), 10, t0)
                }
            };
            assert_eq!(proposed, proposes, "{name}: event {i} ({event:?})");
        }
    }
}

#[test]
fn a_pending_expansion_counts_for_the_high_watermark_until_refused() {
    let t0 = Instant::now();
    let mut st = leader(&[1, 2], 10, t0);
    st.on_follower_fetch(2, 10, 10, t0);
    st.on_follower_fetch(3, 10, 10, t0);
    let change = st.propose_expansion(3, 10, 10, t0).expect("joins");
    // The log grows; 2 keeps up, 3 does not: the joining follower holds the high watermark.
    st.on_follower_fetch(2, 12, 12, t0);
    assert_eq!(st.isr_high_watermark(12), Some(10));
    // A stale answer (another partition epoch) changes nothing.
    let stale = IsrChange {
        partition_epoch: 7,
        ..change.clone()
    };
    st.isr_change_finished(&stale, IsrOutcome::Refused, t0);
    assert_eq!(st.isr_high_watermark(12), Some(10));
    st.isr_change_finished(&change, IsrOutcome::Refused, t0);
    assert_eq!(
        st.isr_high_watermark(12),
        Some(12),
        "refused: 3 no longer counts"
    );
}

#[test]
fn isr_shrink_from_a_table() {
    let lag_max_ms = 100;
    // (follower 2's fetch offset, ms of its fetch, ms of the shrink check) with the log at 10
    //   → the new ISR proposed, if any
    let table: &[(i64, u64, u64, Option<&[BrokerId]>)] = &[
        (10, 0, 500, None),       // at the log end: caught up now, never lagging
        (5, 0, 100, None),        // behind, caught up last at 0: exactly at the limit
        (5, 0, 101, Some(&[1])),  // past the limit: leaves
        (5, 50, 101, Some(&[1])), // a fetch that reaches nothing does not refresh it
    ];
    let t0 = Instant::now();
    for (i, &(offset, fetch_ms, check_ms, want)) in table.iter().enumerate() {
        let mut st = leader(&[1, 2], 10, t0);
        st.on_follower_fetch(2, offset, 10, at(t0, fetch_ms));
        let change = st.propose_shrink(10, lag_max_ms, at(t0, check_ms));
        assert_eq!(
            change.as_ref().map(|c| c.new_isr.as_slice()),
            want,
            "row {i}"
        );
        if let Some(c) = change {
            assert!(!c.expands);
            assert_eq!(c.partition_epoch, 0);
        }
    }
}

#[test]
fn read_replica_candidates_are_in_sync_followers_holding_the_offset() {
    let t0 = Instant::now();
    let mut st = leader(&[1, 2], 10, t0);
    st.on_follower_fetch(2, 8, 10, at(t0, 5));
    st.on_follower_fetch(3, 10, 10, at(t0, 5)); // caught up but outside the ISR
                                                // (fetch offset) → candidates
    let table: &[(i64, &[BrokerId])] = &[(8, &[2]), (9, &[]), (0, &[2])];
    for &(offset, want) in table {
        let ids: Vec<BrokerId> = st
            .read_replica_candidates(offset, at(t0, 10))
            .iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(ids, want, "fetch offset {offset}");
    }
    assert_eq!(
        st.replica_progress(10),
        vec![(1, 10, true), (2, 8, true), (3, 10, false)]
    );
}

#[test]
fn high_watermark_sent_to_a_follower() {
    let t0 = Instant::now();
    let mut st = leader(&[1, 2], 10, t0);
    assert!(st.high_watermark_unsent(2, 0));
    st.record_high_watermark_sent(2, 5);
    assert!(!st.high_watermark_unsent(2, 5));
    assert!(st.high_watermark_unsent(2, 6));
    st.record_high_watermark_sent(2, 3); // never goes back
    assert!(!st.high_watermark_unsent(2, 5));
    assert!(!st.high_watermark_unsent(9, 5), "not a follower");
}
