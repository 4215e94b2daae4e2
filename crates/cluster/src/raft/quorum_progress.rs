//! What the leader of the controller quorum knows of each voter, for DescribeQuorum (KIP-595,
//! KIP-836): its log end offset, the last time it fetched, and the last time it had caught up
//! with the leader.
//!
//! openraft pushes entries instead of having followers fetch, so a voter's "fetch" is its
//! successful answer to an AppendEntries (heartbeats included), timed when the answer reaches
//! the leader. Caught up follows Kafka's `LeaderState.ReplicaState` rule: a voter whose log end
//! reaches the leader's log end as of its answer caught up then; one that reaches what the
//! leader's log end was at its previous answer caught up as of that previous answer (so a voter
//! that trails a busy leader by one round trip still counts as caught up).
//!
//! Everything belongs to one leader term: a new term (this node leads again after another did)
//! starts from nothing known (-1), as Kafka's leader state does. Times come from the injected
//! clock, in wall-clock milliseconds.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ferry_common::SharedClock;
use serde::{Deserialize, Serialize};

/// One voter's progress as the leader saw it; -1 where nothing is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoterProgress {
    /// The offset after the last entry the voter holds (Kafka's log end offset).
    pub log_end_offset: i64,
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
    /// The leader's log end at the voter's last answer.
    last_fetch_leader_end: i64,
}

impl VoterProgress {
    const UNKNOWN: Self = Self {
        log_end_offset: -1,
        last_fetch_ms: -1,
        last_caught_up_ms: -1,
        last_fetch_leader_end: -1,
    };
}

#[derive(Debug, Default)]
struct State {
    term: u64,
    /// The leader's own log end offset; -1 before it is known in this term.
    leader_end: i64,
    voters: BTreeMap<u64, VoterProgress>,
}

impl State {
    /// Moves to `term` if it is newer; false if `term` is older (a late answer).
    fn enter(&mut self, term: u64) -> bool {
        if term < self.term {
            return false;
        }
        if term > self.term {
            *self = State {
                term,
                leader_end: -1,
                voters: BTreeMap::new(),
            };
        }
        true
    }
}

/// The leader's record of its voters' progress, shared by the transport (which sees the
/// answers) and the controller (which describes the quorum).
#[derive(Debug)]
pub struct QuorumProgress {
    clock: SharedClock,
    state: Mutex<State>,
}

impl QuorumProgress {
    pub fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The leader of `term` has entries up to `log_end_offset` (exclusive).
    pub fn leader_log_end(&self, term: u64, log_end_offset: i64) {
        let mut st = self.state();
        if st.enter(term) {
            st.leader_end = st.leader_end.max(log_end_offset);
        }
    }

    /// `voter` answered an AppendEntries of `term` successfully and now holds entries up to
    /// `log_end_offset` (exclusive).
    pub fn acknowledged(&self, term: u64, voter: u64, log_end_offset: i64) {
        let now = self.clock.now_ms();
        let mut st = self.state();
        if !st.enter(term) {
            return;
        }
        let leader_end = st.leader_end;
        let v = st.voters.entry(voter).or_insert(VoterProgress::UNKNOWN);
        if log_end_offset >= leader_end {
            v.last_caught_up_ms = v.last_caught_up_ms.max(now);
        } else if v.last_fetch_leader_end > 0 && log_end_offset >= v.last_fetch_leader_end {
            v.last_caught_up_ms = v.last_caught_up_ms.max(v.last_fetch_ms);
        }
        v.last_fetch_leader_end = leader_end;
        v.last_fetch_ms = v.last_fetch_ms.max(now);
        v.log_end_offset = v.log_end_offset.max(log_end_offset);
    }

    /// Each voter's progress in `term` (none known for another term).
    pub fn voters(&self, term: u64) -> BTreeMap<u64, VoterProgress> {
        let st = self.state();
        if st.term == term {
            st.voters.clone()
        } else {
            BTreeMap::new()
        }
    }

    /// The clock's time now, for the leader's own entry.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_common::ManualClock;

    fn progress() -> (std::sync::Arc<ManualClock>, QuorumProgress) {
        let clock = ManualClock::new(1_000);
        (clock.clone(), QuorumProgress::new(clock))
    }

    #[test]
    fn a_voter_at_the_leaders_log_end_is_caught_up_at_its_answer() {
        let (clock, p) = progress();
        p.leader_log_end(3, 10);
        assert!(p.voters(3).is_empty(), "nothing known before an answer");
        p.acknowledged(3, 2, 10);
        let v = p.voters(3)[&2];
        assert_eq!(
            (v.log_end_offset, v.last_fetch_ms, v.last_caught_up_ms),
            (10, 1_000, 1_000)
        );
        clock.advance(500);
        p.leader_log_end(3, 15);
        p.acknowledged(3, 2, 12);
        let v = p.voters(3)[&2];
        assert_eq!(
            (v.log_end_offset, v.last_fetch_ms, v.last_caught_up_ms),
            (12, 1_500, 1_000),
            "behind the leader's end now, and short of its end at the previous answer"
        );
    }

    #[test]
    fn reaching_the_previous_answers_leader_end_counts_as_caught_up_then() {
        let (clock, p) = progress();
        p.leader_log_end(1, 10);
        p.acknowledged(1, 2, 8);
        assert_eq!(p.voters(1)[&2].last_caught_up_ms, -1);
        clock.advance(100);
        p.leader_log_end(1, 20);
        // It holds all the leader had at its previous answer (10), not yet all it has now.
        p.acknowledged(1, 2, 15);
        let v = p.voters(1)[&2];
        assert_eq!((v.last_fetch_ms, v.last_caught_up_ms), (1_100, 1_000));
    }

    #[test]
    fn a_new_term_forgets_the_old_one_and_late_answers_are_ignored() {
        let (clock, p) = progress();
        p.leader_log_end(1, 5);
        p.acknowledged(1, 2, 5);
        clock.advance(10);
        p.leader_log_end(2, 7);
        assert!(p.voters(2).is_empty());
        assert!(p.voters(1).is_empty(), "term 1 is gone");
        p.acknowledged(1, 3, 5);
        assert!(
            p.voters(2).is_empty(),
            "an answer of the old term is not counted"
        );
        p.acknowledged(2, 3, 7);
        assert_eq!(p.voters(2)[&3].last_caught_up_ms, 1_010);
    }
}
