//! The states of a transactional id, with Kafka's ids (the status byte of `__transaction_state`
//! values), names (what DescribeTransactions and ListTransactions report) and allowed
//! transitions.

/// Where a transactional id's transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionState {
    /// No transaction open; InitProducerId leaves an id here.
    Empty,
    /// Partitions (or a group's offsets) have been added: the transaction is open.
    Ongoing,
    /// EndTxn(commit) is durable; markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a fenced producer or a timeout is durable; markers are being written.
    PrepareAbort,
    /// Every partition has its COMMIT marker.
    CompleteCommit,
    /// Every partition has its ABORT marker.
    CompleteAbort,
    /// The id expired: a tombstone is being written and the id leaves memory with it.
    Dead,
    /// The coordinator bumps the epoch to fence the producer before aborting. Never written to
    /// the log nor completed: it is at once replaced by PrepareAbort.
    PrepareEpochFence,
}

use TransactionState::*;

impl TransactionState {
    pub const ALL: [TransactionState; 8] = [
        Empty,
        Ongoing,
        PrepareCommit,
        PrepareAbort,
        CompleteCommit,
        CompleteAbort,
        Dead,
        PrepareEpochFence,
    ];

    /// The status byte of a `__transaction_state` value.
    pub fn id(self) -> i8 {
        match self {
            Empty => 0,
            Ongoing => 1,
            PrepareCommit => 2,
            PrepareAbort => 3,
            CompleteCommit => 4,
            CompleteAbort => 5,
            Dead => 6,
            PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name the admin APIs use.
    pub fn name(self) -> &'static str {
        match self {
            Empty => "Empty",
            Ongoing => "Ongoing",
            PrepareCommit => "PrepareCommit",
            PrepareAbort => "PrepareAbort",
            CompleteCommit => "CompleteCommit",
            CompleteAbort => "CompleteAbort",
            Dead => "Dead",
            PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states a transaction may be in when it moves to `self` (Kafka's transition table).
    pub fn valid_previous_states(self) -> &'static [TransactionState] {
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    pub fn can_follow(self, previous: TransactionState) -> bool {
        self.valid_previous_states().contains(&previous)
    }

    /// Whether an id idle in this state may expire: no transaction is open.
    pub fn expiration_allowed(self) -> bool {
        matches!(self, Empty | CompleteCommit | CompleteAbort)
    }

    /// Whether markers are (to be) written for this state.
    pub fn is_prepared(self) -> bool {
        matches!(self, PrepareCommit | PrepareAbort)
    }
}

impl std::fmt::Display for TransactionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for s in TransactionState::ALL {
            assert_eq!(TransactionState::from_id(s.id()), Some(s));
            assert_eq!(TransactionState::from_name(s.name()), Some(s));
        }
        assert_eq!(TransactionState::from_id(8), None);
        assert_eq!(TransactionState::from_name("ongoing"), None);
    }

    #[test]
    fn transitions_follow_kafka_table() {
        assert!(Ongoing.can_follow(Empty));
        assert!(Ongoing.can_follow(CompleteCommit));
        assert!(PrepareCommit.can_follow(Ongoing));
        assert!(!PrepareCommit.can_follow(Empty));
        assert!(!PrepareCommit.can_follow(PrepareAbort));
        assert!(PrepareAbort.can_follow(PrepareEpochFence));
        assert!(!CompleteCommit.can_follow(PrepareAbort));
        assert!(!CompleteAbort.can_follow(Ongoing));
        assert!(Dead.can_follow(CompleteAbort));
        assert!(!Dead.can_follow(Ongoing));
        assert!(!Empty.can_follow(Ongoing));
        assert!(!Empty.can_follow(PrepareCommit));
    }
}
